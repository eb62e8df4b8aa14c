package testutil

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// HTTPServer is a server that ServeLocal runs: net/http's, or one built
// over it, that serves a listener until Shutdown.
type HTTPServer interface {
	Serve(l net.Listener) error
	Shutdown(ctx context.Context) error
}

// ServeLocal serves srv on 127.0.0.1:0 until the test ends, then shuts it
// down within timeout; a Serve or a Shutdown that fails fails the test. It
// returns the base URL ("http://127.0.0.1:port").
func ServeLocal(t testing.TB, srv HTTPServer, timeout time.Duration) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return "http://" + l.Addr().String()
}

// Imports lists the packages that the package in the test's directory
// imports (go list's Imports: its own files', not its tests'); the test
// fails when go list does or names none.
func Imports(t testing.TB) []string {
	t.Helper()
	out, err := exec.Command(GoTool(), "list", "-f", `{{join .Imports "\n"}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports := strings.Fields(string(out))
	if len(imports) == 0 {
		t.Fatal("go list names no import")
	}
	return imports
}

// Import paths that RefuseImports is often given.
const (
	// WireTypes are the mesh's protobuf types and the protobuf runtime.
	WireTypes = "github.com/gracewatch/gracewatch/proto/gwpb"
	Protobuf  = "google.golang.org/protobuf/..."
	// AggregatorRoot is the aggregator's Service.
	AggregatorRoot = "github.com/gracewatch/gracewatch/aggregator"
	// AggregatorAPI is the HTTP API's types.
	AggregatorAPI = "github.com/gracewatch/gracewatch/aggregator/api"
)

// RefuseImports fails the test for every package that the package in the
// test's directory imports (Imports) and refuse names: a path, or a path
// followed by "/..." for it and every package below it. who names the
// package in the message, why says what to do instead.
func RefuseImports(t testing.TB, who, why string, refuse ...string) {
	t.Helper()
	for _, path := range Imports(t) {
		for _, r := range refuse {
			if prefix, tree := strings.CutSuffix(r, "/..."); path == r || tree && (path == prefix || strings.HasPrefix(path, prefix+"/")) {
				t.Errorf("%s imports %s: %s", who, path, why)
			}
		}
	}
}
