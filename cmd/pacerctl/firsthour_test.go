package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The first hour of a new user (issue 12): version, a short answer to a
// bare pacerctl, PACER_* defaults, and errors that say what to run next.

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		r := runArgs(args...)
		if r.code != 0 || r.stdout != "pacerctl "+version+"\n" || r.stderr != "" {
			t.Errorf("pacerctl %v: %+v", args, r)
		}
	}
}

func TestBareIsShort(t *testing.T) {
	r := runArgs()
	if r.code != exitUsage || r.stdout != "" {
		t.Fatalf("bare pacerctl: %+v", r)
	}
	if n := strings.Count(r.stderr, "\n"); n > 6 || !strings.Contains(r.stderr, "Run 'pacerctl help' for usage.") {
		t.Errorf("bare pacerctl printed %d lines to stderr, want a few ending with the way to help:\n%s", n, r.stderr)
	}
}

func runEnv(envVars map[string]string, args ...string) result {
	var out, errOut bytes.Buffer
	e := env{stdout: &out, stderr: &errOut, now: func() time.Time { return t0 }, getenv: func(k string) string { return envVars[k] }}
	code := run(context.Background(), e, args)
	return result{code, out.String(), errOut.String()}
}

func TestEnvDefaults(t *testing.T) {
	h := newHarness(t)
	vars := map[string]string{"PACER_REDIS": h.redis.Socket, "PACER_CURVES": "../../configs/curves"}
	if r := runEnv(vars, "campaign", "set", "c1", "--daily", "1units", "--curve", "daytime"); r.code != 0 {
		t.Fatalf("campaign set with PACER_REDIS and PACER_CURVES: %+v", r)
	}
	if r := runEnv(vars, "curve", "list"); r.code != 0 || !strings.Contains(r.stdout, "daytime") || r.stderr != "" {
		t.Errorf("curve list with PACER_CURVES: %+v", r)
	}
	// A flag beats the environment.
	vars["PACER_REDIS"] = filepath.Join(t.TempDir(), "nothing.sock")
	if r := runEnv(vars, "--redis", h.redis.Socket, "campaign", "list"); r.code != 0 || !strings.Contains(r.stdout, "c1") {
		t.Errorf("--redis over PACER_REDIS: %+v", r)
	}
	if r := runEnv(map[string]string{"PACER_REDIS": "/a.sock,h:1"}, "campaign", "list"); r.code != exitUsage {
		t.Errorf("bad PACER_REDIS: %+v", r)
	}
}

func TestErrorsSayWhatToRunNext(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--redis", filepath.Join(dir, "redis.sock"), "campaign", "list"}, "`make run`, then `. .run/env` (sets PACER_REDIS) or pass --redis .run/redis.sock"},
		{[]string{"--redis", "127.0.0.1:1", "campaign", "list"}, "no Redis ledger answers on --redis 127.0.0.1:1"},
		{[]string{"--socket", filepath.Join(dir, "pacer.sock"), "spend", "demo", "1units"}, "`make run`, then `. .run/env` (sets PACER_SOCKET) or pass --socket .run/pacer-1.sock"},
	} {
		r := runArgs(append([]string{"--timeout", "5s"}, tc.args...)...)
		if r.code != exitFailure || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("pacerctl %q: exit %d, stderr %q; want exit 1 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

func TestDailyZeroAndReportHint(t *testing.T) {
	h := newHarness(t)
	h.ok("campaign", "set", "c1", "--daily", "1units")
	// A new campaign with nothing to spend is refused; cutting an existing
	// one to 0 stays possible (TestCampaignSetAdjustsOpenDay).
	for _, zero := range []string{"0", "0units"} {
		r := h.run("campaign", "set", "c2", "--daily", zero)
		if want := `pacerctl: campaign set: campaign "c2" is new: --daily 0 would never spend; give a positive budget`; r.code != exitUsage || !strings.HasPrefix(r.stderr, want) {
			t.Errorf("new campaign with --daily %s: %+v, want exit 2 and %q", zero, r, want)
		}
	}
	var r result
	h.openToday("c1")
	r = h.run("report", "c1")
	if want := "(--day defaults to yesterday; for today's provisional account run `pacerctl report c1 --day 2099-03-08`)"; r.code != exitFailure || !strings.Contains(r.stderr, want) {
		t.Errorf("report of a campaign opened today: %+v, want %q", r, want)
	}
	if r := h.run("report", "c1", "--day", "2099-03-08"); r.code != 0 || !strings.Contains(r.stdout, "PROVISIONAL") {
		t.Errorf("report --day today: %+v", r)
	}
}

func TestMissingCurvesSaysWhatToPass(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	r := runArgs("--curves", missing, "curve", "list")
	if r.code != 0 || !strings.Contains(r.stderr, "Pass --curves DIR (or set PACER_CURVES; configs/curves in a source checkout)") {
		t.Errorf("curve list without a curves directory: %+v", r)
	}
}
