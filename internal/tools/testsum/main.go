// Command testsum runs `go test -json` with the given arguments and prints
// one line per package as it finishes, a line every 30 s naming the
// packages still running, the output of failed tests, and a summary. It
// exits with go test's status (or 1 if it saw a failure go test did not
// report), so `make test` shows progress and still fails when a test does.
//
// Usage: go run ./internal/tools/testsum [go test flags] [packages]
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

func main() {
	cmd := exec.Command("go", append([]string{"test", "-json"}, os.Args[1:]...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsum:", err)
		os.Exit(2)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testsum:", err)
		os.Exit(2)
	}
	failed := summarise(out, os.Stdout, time.Now, 30*time.Second)
	err = cmd.Wait()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		os.Exit(ee.ExitCode())
	case err != nil:
		fmt.Fprintln(os.Stderr, "testsum:", err)
		os.Exit(2)
	case failed:
		os.Exit(1)
	}
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build events

	Test    string
	Elapsed float64
	Output  string
}

type pkgState struct {
	start time.Time
	// output of tests still running (dropped when they pass) and of the
	// package itself, printed if the package fails.
	tests    map[string][]string
	failed   []string // failed tests' output, in order
	pkgLines []string
}

// summarise reads go test's JSON events from r, writes progress to w, and
// reports whether any package or test failed.
func summarise(r io.Reader, w io.Writer, now func() time.Time, every time.Duration) bool {
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	running := map[string]*pkgState{}
	var okPkgs, failPkgs []string
	var failTests []string
	anyFailed := false
	tick := time.NewTicker(every)
	defer tick.Stop()
	begin := now()
	for {
		select {
		case <-tick.C:
			if len(running) == 0 {
				continue
			}
			var names []string
			for p, st := range running {
				names = append(names, fmt.Sprintf("%s (%s)", short(p), now().Sub(st.start).Round(time.Second)))
			}
			slices.Sort(names)
			fmt.Fprintf(w, "      … %s elapsed; still running: %s\n", now().Sub(begin).Round(time.Second), strings.Join(names, ", "))
			continue
		case line, ok := <-lines:
			if !ok {
				fmt.Fprintf(w, "\n%d packages ok, %d failed", len(okPkgs), len(failPkgs))
				if len(failTests) > 0 {
					fmt.Fprintf(w, "; failed tests: %s", strings.Join(failTests, ", "))
				}
				fmt.Fprintf(w, " (%s)\n", now().Sub(begin).Round(time.Second))
				return anyFailed
			}
			var e event
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				fmt.Fprintln(w, line)
				continue
			}
			if e.Package == "" {
				if e.Action == "build-output" {
					fmt.Fprint(w, e.Output) // compile errors
				}
				continue
			}
			st := running[e.Package]
			if st == nil {
				st = &pkgState{start: now(), tests: map[string][]string{}}
				running[e.Package] = st
			}
			switch {
			case e.Action == "output" && e.Test != "":
				st.tests[e.Test] = append(st.tests[e.Test], e.Output)
			case e.Action == "output" || e.Action == "build-output":
				st.pkgLines = append(st.pkgLines, e.Output)
			case e.Test != "" && e.Action == "fail":
				st.failed = append(st.failed, st.tests[e.Test]...)
				delete(st.tests, e.Test)
				failTests = append(failTests, e.Test+" ("+short(e.Package)+")")
				anyFailed = true
			case e.Test != "" && (e.Action == "pass" || e.Action == "skip"):
				delete(st.tests, e.Test)
			case e.Test == "" && (e.Action == "pass" || e.Action == "skip"):
				delete(running, e.Package)
				if e.Action == "pass" || hasTests(st) {
					fmt.Fprintf(w, "ok    %-40s %6.1fs\n", short(e.Package), e.Elapsed)
					okPkgs = append(okPkgs, e.Package)
				}
			case e.Test == "" && e.Action == "fail":
				delete(running, e.Package)
				anyFailed = true
				failPkgs = append(failPkgs, e.Package)
				fmt.Fprintf(w, "FAIL  %-40s %6.1fs\n", short(e.Package), e.Elapsed)
				for _, l := range st.failed {
					fmt.Fprint(w, "      "+l)
				}
				// Tests still running when the package failed
				// (a timeout or a panic) and the package's own output.
				for _, out := range st.tests {
					for _, l := range out {
						fmt.Fprint(w, "      "+l)
					}
				}
				for _, l := range st.pkgLines {
					fmt.Fprint(w, "      "+l)
				}
			}
		}
	}
}

func hasTests(st *pkgState) bool {
	for _, l := range st.pkgLines {
		if strings.Contains(l, "no test files") {
			return false
		}
	}
	return true
}

func short(pkg string) string {
	return strings.TrimPrefix(pkg, "github.com/pacer/pacer/")
}
