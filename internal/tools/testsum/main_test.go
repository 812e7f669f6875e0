package main

import (
	"strings"
	"testing"
	"time"
)

func TestSummarise(t *testing.T) {
	events := `{"Action":"start","Package":"github.com/pacer/pacer/a"}
{"Action":"run","Package":"github.com/pacer/pacer/a","Test":"TestGood"}
{"Action":"output","Package":"github.com/pacer/pacer/a","Test":"TestGood","Output":"noise of a passing test\n"}
{"Action":"pass","Package":"github.com/pacer/pacer/a","Test":"TestGood","Elapsed":0.1}
{"Action":"run","Package":"github.com/pacer/pacer/a","Test":"TestBad"}
{"Action":"output","Package":"github.com/pacer/pacer/a","Test":"TestBad","Output":"    bad_test.go:9: want 1, got 2\n"}
{"Action":"fail","Package":"github.com/pacer/pacer/a","Test":"TestBad","Elapsed":0.2}
{"Action":"fail","Package":"github.com/pacer/pacer/a","Elapsed":1.5}
{"Action":"start","Package":"github.com/pacer/pacer/b"}
{"Action":"pass","Package":"github.com/pacer/pacer/b","Elapsed":2.5}
{"Action":"start","Package":"github.com/pacer/pacer/c"}
{"Action":"output","Package":"github.com/pacer/pacer/c","Output":"?   \tgithub.com/pacer/pacer/c\t[no test files]\n"}
{"Action":"skip","Package":"github.com/pacer/pacer/c","Elapsed":0}
{"ImportPath":"github.com/pacer/pacer/d","Action":"build-output","Output":"d/x.go:1: syntax error\n"}
`
	var out strings.Builder
	failed := summarise(strings.NewReader(events), &out, time.Now, time.Hour)
	got := out.String()
	if !failed {
		t.Error("a failed test was not reported as a failure")
	}
	for _, want := range []string{
		"FAIL  a ", "bad_test.go:9: want 1, got 2", "ok    b ", "d/x.go:1: syntax error",
		"1 packages ok, 1 failed; failed tests: TestBad (a)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{"noise of a passing test", " c "} {
		if strings.Contains(got, unwanted) {
			t.Errorf("output has %q:\n%s", unwanted, got)
		}
	}

	out.Reset()
	if summarise(strings.NewReader(`{"Action":"pass","Package":"p","Elapsed":1}`+"\n"), &out, time.Now, time.Hour) {
		t.Errorf("all passing reported as failed: %s", out.String())
	}
}
