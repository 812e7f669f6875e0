package compat_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestGoClientFromAnotherModule builds examples/goclient — a module of its
// own that imports github.com/pacer/pacer/transport through a replace
// directive, as the README tells bidders to — and runs it against a real
// pacerd. It fails if the client stops being importable from outside, or
// if the example's go.mod/go.sum fall behind the main module's.
func TestGoClientFromAnotherModule(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go not on PATH: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "goclient")
	build := exec.CommandContext(ctx, goBin, "build", "-mod=readonly", "-o", bin, ".")
	build.Dir = filepath.Join("..", "examples", "goclient")
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build in examples/goclient: %v\n%s\n(run `go mod tidy` there if the main module's requirements changed)", err, out)
	}
	sock := startPacerd(t)
	// The example's 20 ms read timeout is a bidder's (and bounds Dial's
	// first PING too); this test checks the client is importable and
	// works, not latency, so it allows what a machine at a load average of
	// 20 can take.
	out, err := exec.CommandContext(ctx, bin, "-socket", sock, "-read-timeout", "1m", "-timeout", "3m").CombinedOutput()
	if err != nil {
		t.Fatalf("goclient: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "SPEND: allowed\n") || !strings.Contains(string(out), "active") {
		t.Errorf("goclient printed\n%s\nwant an allowed SPEND and an active BALANCE", out)
	}
}
