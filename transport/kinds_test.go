package transport

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The package's tests run once per socket server: TestMain runs them in
// this process with goroutines, then (on Linux) runs this test binary
// again, with the same flags, once each with PACER_TEST_SOCKET_SERVER=epoll
// and =hybrid. Every protocol, limits, deadline, credential and
// compatibility test thus holds for every server, and a failure under any
// fails the package.
const kindEnv = "PACER_TEST_SOCKET_SERVER"

// testKind is the socket server this process's tests run against.
func testKind() SocketServer {
	if k := os.Getenv(kindEnv); k != "" {
		return SocketServer(k)
	}
	return Goroutines
}

// serverKinds are the servers benchmarks compare.
func serverKinds() []SocketServer {
	if eventLoopSupported {
		return []SocketServer{Goroutines, EventLoop, Hybrid}
	}
	return []SocketServer{Goroutines}
}

// runOtherKinds re-runs the test binary once per other socket server and
// returns the worst exit code.
func runOtherKinds() int {
	if os.Getenv(kindEnv) != "" || !eventLoopSupported {
		return 0
	}
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
		return 0 // the benchmarks compare the servers themselves
	}
	code := 0
	for _, kind := range []SocketServer{EventLoop, Hybrid} {
		fmt.Printf("=== transport: the same tests against socket_server %s\n", kind)
		cmd := exec.Command(os.Args[0], os.Args[1:]...)
		cmd.Env = append(os.Environ(), kindEnv+"="+string(kind))
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Printf("transport tests with socket_server %s: %v\n", kind, err)
			code = 1
		}
	}
	return code
}

// TestSocketServerChoice: the setting's values, its default, and a Serve
// that refuses an unknown server at once instead of serving with another.
func TestSocketServerChoice(t *testing.T) {
	def, err := ParseSocketServer("")
	want := Goroutines
	if eventLoopSupported {
		want = Hybrid // the cheapest per request in docs/BENCHMARKS.md's quiet runs
	}
	if err != nil || def != want {
		t.Errorf(`ParseSocketServer("") = %q, %v; want %q`, def, err, want)
	}
	if k, err := ParseSocketServer("goroutines"); err != nil || k != Goroutines {
		t.Errorf("goroutines: %q, %v", k, err)
	}
	if k, err := ParseSocketServer("epoll"); eventLoopSupported != (err == nil) || (err == nil && k != EventLoop) {
		t.Errorf("epoll: %q, %v", k, err)
	}
	// uring was removed: the setting says so and names what to use.
	if _, err := ParseSocketServer("uring"); err == nil || !strings.Contains(err.Error(), "socket_server uring was removed; use hybrid (the default on Linux), epoll or goroutines") {
		t.Errorf("uring: %v", err)
	}
	if k, err := ParseSocketServer("hybrid"); eventLoopSupported != (err == nil) || (err == nil && k != Hybrid) {
		t.Errorf("hybrid: %q, %v", k, err)
	}
	if _, err := ParseSocketServer("threads"); err == nil || !strings.Contains(err.Error(), `unknown socket_server "threads"`) {
		t.Errorf("threads: %v", err)
	}
	ln, err := ListenUnix(filepath.Join(socketDir(t), "s"), 0)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(newFakeSpender(), ServerConfig{Server: "threads"})
	defer srv.Close()
	if err := srv.Serve(ln); err == nil || !strings.Contains(err.Error(), "unknown socket_server") {
		t.Fatalf("Serve with socket_server threads = %v, want a refusal", err)
	}
}
