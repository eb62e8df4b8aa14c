# gracewatch build, test and benchmark entry points.
GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X github.com/gracewatch/gracewatch/internal/version.Version=$(VERSION)
PKGS      := ./...
# Per-target budget of `make fuzz` (each fuzz target runs this long).
FUZZTIME  ?= 10s
# The Go that runs `make fuzz`. Go 1.26's fuzzing coordinator can fail a
# target with a bare "context deadline exceeded" and no crasher when
# -fuzztime runs out (go.dev/issue/75804: the deadline is set on the parent
# context a moment before the workers' child context is cancelled). Go 1.27
# fixed it; 1.26.8 has no backport. Measured here: 2 of 150 half-second runs
# of one target failed that way on 1.26.8, none of 150 on 1.27.3. The
# toolchain comes from the Go module proxy (about 76 MB, once per machine);
# everything else builds and tests with the machine's Go.
FUZZ_TOOLCHAIN ?= go1.27.3
STATICCHECK_VERSION := v0.8.2

.PHONY: all build test test-short lint fuzz fuzz-corpus bench demo clean proto proto-check alerts-test

all: build

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/ ./cmd/...

# The whole suite with the race detector. Kernel tests need root, cgroup v2
# and /dev/fuse; with CI=true a missing one fails instead of skipping.
# testreport (internal/testutil/testreport) runs go test -json and prints
# what go test prints (a line per package, the output of what failed), then
# every skipped test with its reason, the ten slowest tests of 30 s or more
# (the long poles of the time budget), then "N passed, N failed, N skipped";
# it exits non-zero when a test or a build failed.
#
# The end-to-end tests (./e2e/) run serially within their package (they
# share the process's environment and default HTTP transport), most of
# their time waiting on real daemons: the scheduler tests (E2E_LANE: real
# Slurm, whose time limits are whole minutes, the trace replay, real Flux)
# run in a test process of their own beside the rest, which share nothing
# with them but the machine (each Slurm, Flux, mesh and network namespace
# is the test's own). Measured on 2 cores: make test 597 s, its e2e
# commands 404 s and 574 s (Flux then in the rest), where e2e alone took
# 940 s.
# testreport runs the three go test commands at once and makes one summary.
TEST_TIMEOUT ?= 30m
E2E_LANE     ?= ^(TestReplay|TestSlurm.*|TestFlux.*)$$
TEST_FLAGS    = -race -count=1 -timeout $(TEST_TIMEOUT) -json
TEST_LIST     = $(shell $(GO) list $(PKGS))
TEST_E2E      = $(filter %/e2e,$(TEST_LIST))
TEST_UNITS    = $(filter-out %/e2e,$(TEST_LIST))
test:
	$(GO) vet $(PKGS)
	$(GO) build -o bin/testreport ./internal/testutil/testreport
	$(if $(TEST_E2E),@echo "bin/testreport $(GO) test $(TEST_FLAGS) ($(words $(TEST_UNITS)) packages but e2e) ::: e2e -run '$(E2E_LANE)' ::: e2e -skip '$(E2E_LANE)'")
	@# e2e compiled once (its failure is reported below): its two commands link from the cache.
	$(if $(TEST_E2E),@$(GO) test -race -count=1 -run '^$$' $(TEST_E2E) >/dev/null 2>&1 || true)
	@bin/testreport $(if $(TEST_UNITS),$(GO) test $(TEST_FLAGS) $(TEST_UNITS) $(if $(TEST_E2E),:::)) \
	  $(if $(TEST_E2E),$(GO) test $(TEST_FLAGS) -run '$(E2E_LANE)' $(TEST_E2E) ::: $(GO) test $(TEST_FLAGS) -skip '$(E2E_LANE)' $(TEST_E2E))

# The same suite squeezed onto one busy CPU (scripts/squeeze.sh: CPU 0 beside
# a busy loop): a test that assumes a speed fails here. Run it idle (make
# test) and squeezed before a submission. Its tests mostly wait on real
# daemons: 736 s where make test took 597 s on 2 cores; the per-package
# timeout is longer all the same.
.PHONY: test-squeezed test-squeezed-short
test-squeezed:
	scripts/squeeze.sh $(MAKE) test TEST_TIMEOUT=60m

# What CI runs squeezed within its budget: every package but e2e, built as
# make test builds them (-race), so that after make test nothing compiles.
SQUEEZED_PKGS ?= $(shell $(GO) list ./... | grep -v /e2e$$)
test-squeezed-short:
	$(GO) build -o bin/testreport ./internal/testutil/testreport
	@echo "scripts/squeeze.sh bin/testreport $(GO) test -race -count=1 -timeout 30m -json (SQUEEZED_PKGS: $(words $(SQUEEZED_PKGS)) packages)"
	@scripts/squeeze.sh bin/testreport $(GO) test -race -count=1 -timeout 30m -json $(SQUEEZED_PKGS)

test-short:
	$(GO) test -short -count=1 $(PKGS)

lint:
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)

# Every fuzz target for FUZZTIME each (go test runs one target at a time),
# with FUZZ_TOOLCHAIN (see above).
fuzz:
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/func //'); do \
	    echo "fuzz $$pkg $$f ($(FUZZTIME))"; \
	    GOTOOLCHAIN=$(FUZZ_TOOLCHAIN) $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

# Commit what fuzzing found: copy the inputs that widened coverage (kept by
# go test in its cache) into each package's testdata/fuzz, where every
# `go test` runs them as regression cases. Run after `make fuzz`.
fuzz-corpus:
	@set -e; cache=$$($(GO) env GOCACHE)/fuzz; mod=$$($(GO) list -m); \
	for pkg in $$($(GO) list $(PKGS)); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/func //'); do \
	    src=$$cache/$$pkg/$$f; [ -d $$src ] || continue; \
	    mkdir -p $$dir/testdata/fuzz/$$f; cp -n $$src/* $$dir/testdata/fuzz/$$f/; \
	    echo "$$pkg $$f: $$(ls $$dir/testdata/fuzz/$$f | wc -l) inputs"; \
	  done; \
	done

# Benchmarks behind BENCHMARKS.md (needs root for the cgroup and epilogue ones).
bench: build
	$(GO) test -run '^$$' -bench 'EpilogTrue|Kill1000' -benchtime 20x -benchmem ./agent/... | tee bench.out
	# The idle agent: one window of whole forced-GC periods (IDLE_SECONDS, 240 s).
	$(GO) test -run '^$$' -bench IdleAgent -benchtime 1x ./agent/ | tee -a bench.out
	# The aggregator fed maximal StateUpdates and Handovers for a minute:
	# its heap stays under the bound stated in aggregator/bounds_test.go.
	GW_MEM_SECONDS=60 $(GO) test -count=1 -run 'TestMemoryUnderMaximalMessages' -v ./aggregator/ | tee -a bench.out

# Failure detection and convergence of memberlist members on loopback
# (BENCHMARKS.md, "Convergence and detection at scale"; about 10 min at
# 1,000 members on a quiet 2-core machine), after the model's predictions
# up to 20,000 members.
SCALE_SIZES ?= 1000
.PHONY: bench-scale
bench-scale:
	$(GO) test -run '^$$' -bench ModelTable -benchtime 1x -v ./internal/meshmodel/
	GW_BENCH_SCALE_SIZES=$(SCALE_SIZES) $(GO) test -run '^$$' -bench ScaleTiming -benchtime 1x -v -timeout 40m ./mesh/

# Issue 16's storm: 1,000 light members going DOWN within a second against
# a real aggregator (BENCHMARKS.md, "Incident storm"; about 5 minutes).
.PHONY: bench-storm
bench-storm:
	$(GO) test -run '^$$' -bench IncidentStorm -benchtime 1x -v -timeout 30m ./e2e/

# An aggregator killed with SIGKILL and restarted, at 100 and 1,000 light
# simulated nodes, with and without a flood of invented members before the
# kill: how soon it serves every node again (BENCHMARKS.md, "Crash recovery
# at 1,000 nodes"; about a minute).
CRASH_NODES ?= 100,1000
.PHONY: bench-crash
bench-crash:
	GW_BENCH_CRASH_NODES=$(CRASH_NODES) $(GO) test -run '^$$' -bench CrashRecovery -benchtime 1x -v -timeout 30m ./e2e/

# A window of a real job trace replayed on a real 12-node Slurm with seeded
# slow and hung teardowns: Slurm alone, gracewatch draining, and draining
# with reservations, side by side (e2e TestReplay; BENCHMARKS.md, "Replay of
# a real trace"). The default window (300 jobs from the 101st, compression
# 120, the two 94-hour jobs in it trimmed to 6 hours of trace time) took 45
# minutes on a 2-core machine (three runs of 15 minutes). It writes the
# runs' figures to
# REPLAY_CSV and plots them across the hang rates of REPLAY_HUNG to
# REPLAY_SVG. The short CI variant is TestReplay with its defaults.
REPLAY_TRACE       ?= $(abspath ../shared/traces/coare-saliksik-2020.swf.gz)
# REPLAY_START is how many of the trace's jobs come before the window (100:
# it starts at the 101st).
REPLAY_START       ?= 100
REPLAY_JOBS        ?= 300
REPLAY_NODES       ?= 12
REPLAY_COMPRESSION ?= 120
REPLAY_HUNG        ?= 0.01
REPLAY_SEED        ?= 1
REPLAY_RUNS        ?= alone,drain,plan
REPLAY_HORIZON     ?= 3h
# Trims run times longer than this (trace time; 0: none) so that a window
# holding a multi-day job replays in a stated time (docs/replay/README.md).
REPLAY_MAX_RUN     ?= 6h
# How many node-hours more the planning run may lose than draining alone: the
# variation between repeats of one run on 12 nodes, 0.014 on the 200-job
# window (docs/replay/README.md, "Across hang rates on the full window").
REPLAY_PLAN_TOLERANCE ?= 0.015
REPLAY_CSV         ?= $(CURDIR)/docs/replay/replay.csv
REPLAY_SVG         ?= $(REPLAY_CSV:.csv=.svg)
.PHONY: bench-replay replay-plot
bench-replay:
	rm -f $(REPLAY_CSV)
	GRACEWATCH_REPLAY_TRACE=$(REPLAY_TRACE) GRACEWATCH_REPLAY_START=$(REPLAY_START) \
	GRACEWATCH_REPLAY_JOBS=$(REPLAY_JOBS) GRACEWATCH_REPLAY_NODES=$(REPLAY_NODES) \
	GRACEWATCH_REPLAY_COMPRESSION=$(REPLAY_COMPRESSION) GRACEWATCH_REPLAY_HUNG=$(REPLAY_HUNG) \
	GRACEWATCH_REPLAY_SEED=$(REPLAY_SEED) GRACEWATCH_REPLAY_RUNS=$(REPLAY_RUNS) \
	GRACEWATCH_REPLAY_HORIZON=$(REPLAY_HORIZON) GRACEWATCH_REPLAY_CSV=$(REPLAY_CSV) \
	GRACEWATCH_REPLAY_MAX_RUN=$(REPLAY_MAX_RUN) \
	GRACEWATCH_REPLAY_PLAN_TOLERANCE=$(REPLAY_PLAN_TOLERANCE) \
	  $(GO) test -count=1 -run 'TestReplay$$' -v -timeout 6h ./e2e/
	$(MAKE) replay-plot

replay-plot:
	$(GO) run ./internal/replay/replayplot -in $(REPLAY_CSV) -out $(REPLAY_SVG) \
	  -title "Replay: $(REPLAY_JOBS) jobs of $(notdir $(REPLAY_TRACE)) after its first $(REPLAY_START), $(REPLAY_NODES) nodes, compression $(REPLAY_COMPRESSION), seed $(REPLAY_SEED)"

# A local demonstration (scripts/demo.sh; root, cgroup v2, python3, and
# /dev/fuse for a truly unkillable epilogue): an aggregator and three node
# agents on loopback, three jobs ending at once (one epilogue normal, one
# slow within grace, one hung), the scheduler's view from /v1/watch until
# the hung node is DOWN with its diagnosis. On a terminal it then holds the
# cluster for exploring until Ctrl-C (DEMO_HOLD=1/0 overrides; without a
# terminal it stops after the diagnosis). Any exit or signal removes all it
# made; a signal ends it with status 0.
demo: build
	./scripts/demo.sh

clean:
	rm -rf bin dist bench.out

# The shipped Prometheus alerting rules (packaging/examples/prometheus):
# promtool (Debian's prometheus package) checks them and runs their unit
# tests; packaging/alerts_test.go (in `make test`) keeps the metrics they
# name true to what the programs export.
ALERTS := packaging/examples/prometheus
alerts-test:
	promtool check rules $(ALERTS)/gracewatch-alerts.yml
	promtool test rules $(ALERTS)/gracewatch-alerts.test.yml

# Regenerate the protobuf Go code (protoc from Debian's protobuf-compiler,
# protoc-gen-go pinned to the protobuf runtime in go.mod).
PROTOC_GEN_GO_VERSION := v1.36.12
proto:
	GOBIN=$(CURDIR)/bin $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	protoc --plugin=protoc-gen-go=$(CURDIR)/bin/protoc-gen-go -I proto \
	  --go_out=proto/gwpb --go_opt=paths=source_relative proto/gracewatch.proto

# Fails when the committed generated code is not what `make proto` makes.
proto-check: proto
	git diff --exit-code -- proto/gwpb

# Packages (packaging/README.md): the .deb and .rpm of gracewatch-nodeagent
# and gracewatch-aggregator in dist/, and their test (root; installs and
# removes them on this machine; needs lintian, rpm and systemd's
# systemd-analyze, see .ci/run).
.PHONY: packages packages-test

packages:
	GO=$(GO) VERSION=$(VERSION) packaging/build.sh

packages-test:
	GO=$(GO) VERSION=$(VERSION) packaging/test.sh
