// Package packaging holds no code: its test checks that the configuration
// files the packages ship say what the code does. packaging/test.sh runs it,
// and so does `go test ./...`, so that a key added to a Config without its
// line in packaging/etc/ fails the build.
package packaging

import (
	"bufio"
	"bytes"
	"encoding"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/gracewatch/gracewatch/agent"
	"github.com/gracewatch/gracewatch/aggregator"
	"github.com/gracewatch/gracewatch/aggregator/actuate"
	"github.com/gracewatch/gracewatch/internal/config"
)

// setting is a documented default in a shipped file: "#key = value" (no
// space after the "#"; explanations are "# text").
var setting = regexp.MustCompile(`^#([a-z_]+)( *=.*)$`)

// uncomment returns the file with its "#key = value" lines made live, and
// the dotted keys of those lines.
func uncomment(t *testing.T, path string) ([]byte, map[string]bool) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	keys := map[string]bool{}
	table := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "[") {
			table = strings.Trim(line, "[] ")
		}
		if m := setting.FindStringSubmatch(line); m != nil {
			line = m[1] + m[2]
			key := m[1]
			if table != "" {
				key = table + "." + key
			}
			if keys[key] {
				t.Errorf("%s: %s documented twice", path, key)
			}
			keys[key] = true
		}
		out.WriteString(line + "\n")
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes(), keys
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// tomlKeys lists the dotted TOML keys of struct type typ, as the decoder
// sees them: embedded structs without a tag are flattened, values that
// decode themselves (config.Duration) are leaves, and a slice of structs is
// an array of tables.
func tomlKeys(typ reflect.Type, prefix string) []string {
	var keys []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name == "-" {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		isLeaf := reflect.PointerTo(ft).Implements(textUnmarshaler)
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct && !isLeaf {
			keys = append(keys, tomlKeys(ft, prefix)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		key := prefix + name
		switch {
		case ft.Kind() == reflect.Struct && !isLeaf:
			keys = append(keys, tomlKeys(ft, key+".")...)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			keys = append(keys, tomlKeys(ft.Elem(), key+".")...)
		default:
			keys = append(keys, key)
		}
	}
	return keys
}

// emptyToNil sets empty slices to nil, so that `join = []` compares equal
// to an absent join.
func emptyToNil(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			emptyToNil(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				emptyToNil(v.Field(i))
			}
		}
	case reflect.Slice:
		if v.Len() == 0 && !v.IsNil() && v.CanSet() {
			v.Set(reflect.Zero(v.Type()))
		}
		for i := range v.Len() {
			emptyToNil(v.Index(i))
		}
	}
}

// checkDefaults checks that path decodes strictly as shipped, documents every
// key of want's type except those under skip, and decodes to want once
// uncommented.
func checkDefaults[T any](t *testing.T, path string, want T, skip string) {
	t.Helper()
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	shipped := want
	if err := config.Decode(path, orig, &shipped); err != nil {
		t.Fatalf("as shipped: %v", err)
	}
	plain, documented := uncomment(t, path)
	got := want
	if err := config.Decode(path+" (uncommented)", plain, &got); err != nil {
		t.Fatalf("uncommented: %v", err)
	}
	emptyToNil(reflect.ValueOf(&got))
	emptyToNil(reflect.ValueOf(&want))
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: the documented values are not the defaults:\n got  %+v\n want %+v", path, got, want)
	}
	var missing []string
	for _, k := range tomlKeys(reflect.TypeOf(want), "") {
		if skip != "" && strings.HasPrefix(k, skip) {
			continue
		}
		if !documented[k] {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("%s: keys without their \"#key = default\" line: %s", path, strings.Join(missing, ", "))
	}
}

func TestNodeagentConffile(t *testing.T) {
	checkDefaults(t, filepath.Join("etc", "nodeagent.toml"), agent.DefaultConfig(), "")
}

func TestAggregatorConffile(t *testing.T) {
	// [[actuator]] tables have no default to uncomment: their keys are
	// documented in prose and shown live in the examples (next test).
	checkDefaults(t, filepath.Join("etc", "aggregator.toml"), aggregator.DefaultConfig(), "actuator.")
	data, err := os.ReadFile(filepath.Join("etc", "aggregator.toml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range tomlKeys(reflect.TypeFor[actuate.Config](), "") {
		if !regexp.MustCompile(`(?m)^#\s+` + regexp.QuoteMeta(k) + `\s`).Match(data) {
			t.Errorf("aggregator.toml: actuator key %q is not explained", k)
		}
	}
}

// The actuator examples are valid [[actuator]] tables: appended to a
// configuration they decode strictly and validate.
func TestActuatorExamples(t *testing.T) {
	for _, name := range []string{"actuator-slurm.toml", "actuator-flux.toml"} {
		t.Run(name, func(t *testing.T) {
			cfg := aggregatorExample(t, name)
			on := map[string]int{}
			for _, a := range cfg.Actuators {
				on[a.On]++
			}
			if on[actuate.OnDown] == 0 || on[actuate.OnUp] == 0 {
				t.Errorf("want on = \"down\" and on = \"up\" actuators, got %v", on)
			}
		})
	}
}

// The reservation example is a valid [reservations] table that turns them
// on.
func TestReservationExample(t *testing.T) {
	cfg := aggregatorExample(t, "reservations-slurm.toml")
	if !cfg.Reservations.Enabled() || cfg.Reservations.Command[0] != "/etc/gracewatch/slurm-reservation.sh" {
		t.Errorf("the example does not run slurm-reservation.sh: %q", cfg.Reservations.Command)
	}
}

// aggregatorExample is examples/aggregator/name over the aggregator's
// defaults, decoded strictly and validated (with an insecure mesh: the
// examples hold one table each, not the mesh's keys).
func aggregatorExample(t *testing.T, name string) aggregator.Config {
	t.Helper()
	path := filepath.Join("examples", "aggregator", name)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := aggregator.DefaultConfig()
	if err := config.Decode(path, data, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Mesh.Insecure, cfg.Mesh.AllowUnsigned = true, true
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}
