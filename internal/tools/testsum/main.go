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

// summary is what summarise has seen so far.
type summary struct {
	w                io.Writer
	now              func() time.Time
	begin            time.Time
	running          map[string]*pkgState
	okPkgs, failPkgs []string
	failTests        []string
	anyFailed        bool
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
	s := &summary{w: w, now: now, begin: now(), running: map[string]*pkgState{}}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			s.progress()
		case line, ok := <-lines:
			if !ok {
				s.end()
				return s.anyFailed
			}
			s.line(line)
		}
	}
}

// progress names the packages still running, and for how long.
func (s *summary) progress() {
	if len(s.running) == 0 {
		return
	}
	var names []string
	for p, st := range s.running {
		names = append(names, fmt.Sprintf("%s (%s)", short(p), s.now().Sub(st.start).Round(time.Second)))
	}
	slices.Sort(names)
	fmt.Fprintf(s.w, "      … %s elapsed; still running: %s\n", s.now().Sub(s.begin).Round(time.Second), strings.Join(names, ", "))
}

// end writes the totals.
func (s *summary) end() {
	fmt.Fprintf(s.w, "\n%d packages ok, %d failed", len(s.okPkgs), len(s.failPkgs))
	if len(s.failTests) > 0 {
		fmt.Fprintf(s.w, "; failed tests: %s", strings.Join(s.failTests, ", "))
	}
	fmt.Fprintf(s.w, " (%s)\n", s.now().Sub(s.begin).Round(time.Second))
}

// line takes one line of go test's output: a JSON event, or text passed on.
func (s *summary) line(line string) {
	var e event
	if err := json.Unmarshal([]byte(line), &e); err != nil {
		fmt.Fprintln(s.w, line)
		return
	}
	if e.Package == "" {
		if e.Action == "build-output" {
			fmt.Fprint(s.w, e.Output) // compile errors
		}
		return
	}
	st := s.running[e.Package]
	if st == nil {
		st = &pkgState{start: s.now(), tests: map[string][]string{}}
		s.running[e.Package] = st
	}
	switch {
	case e.Action == "output" && e.Test != "":
		st.tests[e.Test] = append(st.tests[e.Test], e.Output)
	case e.Action == "output" || e.Action == "build-output":
		st.pkgLines = append(st.pkgLines, e.Output)
	case e.Test != "" && e.Action == "fail":
		st.failed = append(st.failed, st.tests[e.Test]...)
		delete(st.tests, e.Test)
		s.failTests = append(s.failTests, e.Test+" ("+short(e.Package)+")")
		s.anyFailed = true
	case e.Test != "" && (e.Action == "pass" || e.Action == "skip"):
		delete(st.tests, e.Test)
	case e.Test == "" && (e.Action == "pass" || e.Action == "skip"):
		delete(s.running, e.Package)
		if e.Action == "pass" || hasTests(st) {
			fmt.Fprintf(s.w, "ok    %-40s %6.1fs\n", short(e.Package), e.Elapsed)
			s.okPkgs = append(s.okPkgs, e.Package)
		}
	case e.Test == "" && e.Action == "fail":
		s.packageFailed(e, st)
	}
}

// packageFailed writes a failed package's line and the output that says
// why: its failed tests', then that of tests still running when it failed
// (a timeout or a panic), then the package's own.
func (s *summary) packageFailed(e event, st *pkgState) {
	delete(s.running, e.Package)
	s.anyFailed = true
	s.failPkgs = append(s.failPkgs, e.Package)
	fmt.Fprintf(s.w, "FAIL  %-40s %6.1fs\n", short(e.Package), e.Elapsed)
	for _, l := range st.failed {
		fmt.Fprint(s.w, "      "+l)
	}
	for _, out := range st.tests {
		for _, l := range out {
			fmt.Fprint(s.w, "      "+l)
		}
	}
	for _, l := range st.pkgLines {
		fmt.Fprint(s.w, "      "+l)
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
