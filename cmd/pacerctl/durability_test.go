package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/pacer/pacer/internal/redisproc"
	"github.com/pacer/pacer/internal/redistest"
)

// withoutDurability drops check's lines about the Redis servers as a whole
// ("ok durability", and "unchecked watermark" without --etcd), for tests
// about the days' lines.
func withoutDurability(out string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(out, "\n") {
		if !strings.HasPrefix(line, "ok durability ") && !strings.HasPrefix(line, "unchecked watermark: ") {
			b.WriteString(line)
		}
	}
	return b.String()
}

func TestCheckDurability(t *testing.T) {
	h := newHarness(t) // appendfsync always
	if out := h.ok("check"); !strings.HasPrefix(out, "ok durability fsync: redis at "+h.redis.Socket+" role=master appendonly=yes appendfsync=always replicas=0\n") {
		t.Errorf("check on a durable Redis: %q", out)
	}

	srv := redistest.StartWith(t, redisproc.Options{Persistent: true, AppendFsync: "everysec"})
	h.global = []string{"--redis", srv.Socket}
	r := h.run("check")
	if r.code != 1 || !strings.HasPrefix(r.stdout, "FAIL durability fsync: redis at "+srv.Socket+" runs appendfsync everysec; ledger.durability=fsync needs `appendfsync always` (CONFIG SET appendfsync always") ||
		!strings.Contains(r.stderr, "Redis does not meet ledger.durability=fsync") {
		t.Errorf("check on everysec: %+v", r)
	}
	// --json keeps stdout the days' list and says why on stderr.
	r = h.run("--json", "check")
	var days []dayCheck
	if err := json.Unmarshal([]byte(r.stdout), &days); err != nil || r.code != 1 || !strings.Contains(r.stderr, "FAIL durability fsync") {
		t.Errorf("check --json on everysec: %+v %v", r, err)
	}
	// The operator's explicit opt-out passes, with a warning.
	r = h.run("--durability", "none", "check")
	if r.code != 0 || !strings.Contains(r.stdout, "ok durability none: nothing checked") || !strings.Contains(r.stderr, "warning: ledger.durability=none") {
		t.Errorf("check --durability none: %+v", r)
	}
	if r := h.run("--durability", "replicas:1", "check"); r.code != 1 || !strings.Contains(r.stdout, "has 0 online replica(s)") {
		t.Errorf("check --durability replicas:1 without replicas: %+v", r)
	}
	if r := h.run("--durability", "always", "check"); r.code != 2 || !strings.Contains(r.stderr, "--durability:") {
		t.Errorf("check --durability always: %+v", r)
	}

	managed := redistest.StartWith(t, redisproc.Options{Persistent: true, Conf: "rename-command CONFIG \"\"\n"})
	h.global = []string{"--redis", managed.Socket}
	if r := h.run("check"); r.code != 1 || !strings.Contains(r.stdout, "refuses CONFIG") {
		t.Errorf("check on a Redis without CONFIG: %+v", r)
	}
	if r := h.run("--durability-assume", "fsync", "check"); r.code != 0 || !strings.Contains(r.stdout, "(assumed per ledger.durability_assume)") ||
		!strings.Contains(r.stderr, "not verified") {
		t.Errorf("check --durability-assume fsync on a Redis without CONFIG: %+v", r)
	}
}

// uncheckedWatermark is check's line without --etcd.
const uncheckedWatermark = "unchecked watermark: could not compare each Redis master's watermark with the one the reconciler records in etcd: pass --etcd (or set PACER_ETCD); without it a Redis restored from an older copy under new daemons is not seen here\n"

func TestCheckThroughSentinel(t *testing.T) {
	master := redistest.StartWith(t, redisproc.Options{Persistent: true, TCP: true})
	host, port, _ := strings.Cut(master.Addr, ":")
	sentinel := redistest.StartWith(t, redisproc.Options{Sentinel: true, Conf: "sentinel monitor ledger " + host + " " + port + " 1\n"})
	r := runArgs("--redis", "sentinel://ledger@"+sentinel.Addr, "check")
	if r.code != 0 || r.stdout != "ok durability fsync: redis at "+master.Addr+" (Sentinel master) role=master appendonly=yes appendfsync=always replicas=0\n"+uncheckedWatermark+"no open campaign-days to check\n" {
		t.Errorf("check through Sentinel: %+v", r)
	}
	if r := runArgs("--redis", "sentinel://ledger", "check"); r.code != 2 || !strings.Contains(r.stderr, "--redis:") {
		t.Errorf("bad sentinel address: %+v", r)
	}
}
