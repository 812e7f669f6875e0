package proctest_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/proctest"
)

// Writers on several goroutines all land in a Buffer (run with -race).
func TestBufferTakesConcurrentWriters(t *testing.T) {
	var b proctest.Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				b.Write([]byte("x"))
			}
		})
	}
	wg.Wait()
	if n := len(b.String()); n != 800 {
		t.Fatalf("%d bytes; want 800", n)
	}
	b.Reset()
	if b.String() != "" {
		t.Fatal("Reset left bytes")
	}
}

// A started process is waited for once it listens; its output is kept; it
// is gone after the test's cleanup.
func TestStartWaitsUntilItListens(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "s.sock")
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("python3 not found: install Debian's python3 (scripts/deps.sh does)")
	}
	script := "import socket,sys,time\nprint('starting', flush=True)\ntime.sleep(0.2)\n" +
		"s=socket.socket(socket.AF_UNIX)\ns.bind(sys.argv[1])\ns.listen()\ntime.sleep(60)\n"
	var p *proctest.Proc
	t.Run("inner", func(t *testing.T) {
		p = proctest.Start(t, "listener", "python3", []string{"-c", script, sock}, nil)
		p.WaitListen(t, "unix", sock, time.Minute)
		if !strings.Contains(p.Output.String(), "starting") {
			t.Errorf("output %q", p.Output.String())
		}
	})
	select {
	case <-p.Done():
	default:
		t.Fatal("the process outlived its test's cleanup")
	}
	var ee *exec.ExitError
	if err := p.Err(); !errors.As(err, &ee) {
		t.Fatalf("killed process: Wait says %v", err)
	}
}

// Build builds one of pacer's commands.
func TestBuild(t *testing.T) {
	bin, err := proctest.Build(t.TempDir(), "github.com/pacer/pacer/internal/proctest/testdata/hello", false)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin).Output()
	if err != nil || string(out) != "hello\n" {
		t.Fatalf("%s: %q %v", bin, out, err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatal(err)
	}
}
