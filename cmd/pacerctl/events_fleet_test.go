package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/internal/embedded"
	"github.com/pacer/pacer/internal/proctest"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/transport"
)

// eventFleet is three pacerd processes (pacerd's defaults: a 100 ms tick, a
// 30 s lease window), a real redis-server and a real NATS server (embedded),
// with signed broadcasts; pacerctl runs in-process against them.
type eventFleet struct {
	global  []string // pacerctl's global flags for this fleet
	clients []*transport.Client
}

func startEventFleet(tb testing.TB) *eventFleet {
	tb.Helper()
	dir := tb.TempDir()
	bin, err := proctest.Build(dir, "github.com/pacer/pacer/cmd/pacerd", false)
	if err != nil {
		tb.Fatal(err)
	}
	srv := redistest.Start(tb)
	n, err := embedded.StartNATS()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(n.Close)
	key := filepath.Join(dir, "broadcast.key")
	if err := os.WriteFile(key, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	cfg := filepath.Join(dir, "pacerd.yaml")
	conf := fmt.Sprintf("admin: \"\"\nnats: %q\nbroadcast:\n  key_file: %s\n", n.URL, key)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		tb.Fatal(err)
	}
	f := &eventFleet{global: []string{"--redis", srv.Socket, "--nats", n.URL, "--broadcast-key-file", key}}
	if r := runIn(context.Background(), append(f.global, "campaign", "set", "demo", "--daily", "1000000units")...); r.code != 0 {
		tb.Fatalf("campaign set: %+v", r)
	}
	for _, host := range []string{"a", "b", "c"} {
		sock := filepath.Join(dir, host+".sock")
		p := proctest.Start(tb, "pacerd "+host, bin, []string{"--config", cfg, "--redis", srv.Socket, "--socket", sock,
			"--holder", host, "--curves", filepath.Join(dir, "no-curves"), "--state-dir", filepath.Join(dir, "state-"+host)}, nil)
		p.WaitListen(tb, "unix", sock, time.Minute) // a start at a load average of 20
		c, err := transport.Dial(context.Background(), sock, transport.ClientOptions{})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { c.Close() })
		f.clients = append(f.clients, c)
	}
	// Every host has the campaign loaded and active before the first round.
	f.waitAll(tb, func(d pacer.Decision) bool { return d != pacer.Exhausted }, time.Now())
	return f
}

// runIn runs pacerctl in-process with the wall clock.
func runIn(ctx context.Context, args ...string) result {
	var out, errOut bytes.Buffer
	code := run(ctx, env{stdout: &out, stderr: &errOut, now: time.Now}, args)
	return result{code, out.String(), errOut.String()}
}

// waitAll polls every host's SPEND until its answer satisfies reached and
// returns how long after since the last host got there. A host that does
// not within a minute (a NATS hop and a settings read, at a load average of
// 20, take far less) fails the test.
func (f *eventFleet) waitAll(tb testing.TB, reached func(pacer.Decision) bool, since time.Time) time.Duration {
	tb.Helper()
	took := make([]time.Duration, len(f.clients))
	errs := make([]error, len(f.clients))
	var wg sync.WaitGroup
	for i, c := range f.clients {
		wg.Go(func() {
			for deadline := time.Now().Add(time.Minute); ; {
				d, err := c.Spend(context.Background(), "demo", 1, "")
				if err == nil && reached(d) {
					took[i] = time.Since(since)
					return
				}
				if time.Now().After(deadline) {
					errs[i] = fmt.Errorf("host %d: SPEND answers %v (%v) a minute on", i, d, err)
					return
				}
				time.Sleep(200 * time.Microsecond) // leave the cores to the daemons
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			tb.Fatal(err)
		}
	}
	return slices.Max(took)
}

// round pauses the campaign if it is active, resumes it if paused, with
// pacerctl --nats, and returns how long after pacerctl returned the last
// of the three hosts answered accordingly.
func (f *eventFleet) round(tb testing.TB, pause bool) time.Duration {
	tb.Helper()
	verb, reached := "resume", func(d pacer.Decision) bool { return d != pacer.Exhausted }
	if pause {
		verb, reached = "pause", func(d pacer.Decision) bool { return d == pacer.Exhausted }
	}
	r := runIn(context.Background(), append(f.global, "campaign", verb, "demo")...)
	returned := time.Now()
	if r.code != 0 {
		tb.Fatalf("campaign %s: %+v", verb, r)
	}
	return f.waitAll(tb, reached, returned)
}

// rounds runs n rounds, pause and resume in turn, and returns their
// latencies, sorted.
func (f *eventFleet) rounds(tb testing.TB, n int) []time.Duration {
	lat := make([]time.Duration, 0, n)
	for i := range n {
		lat = append(lat, f.round(tb, i%2 == 0))
	}
	slices.Sort(lat)
	return lat
}

// An operator's pause or resume reaches all three hosts of a fleet of real
// processes a NATS hop and a settings read after pacerctl returns, pause and
// resume back to back. The bound here, 1 s at the 95th of 20 rounds, holds
// at a load average of 20, and is still far below the event rate limit's
// lease window / 8 (3.75 s), which an operator's event does not wait for;
// the p99 at rest is in docs/BENCHMARKS.md (BenchmarkOperatorEvents3Hosts).
func TestOperatorEventsReachThreeHosts(t *testing.T) {
	f := startEventFleet(t)
	lat := f.rounds(t, 20)
	if p95 := lat[len(lat)*95/100]; p95 > time.Second {
		t.Errorf("p95 of 20 pause/resume rounds: %v to reach the last of 3 hosts; want <= 1s (all: %v)", p95, lat)
	}
}

// BenchmarkOperatorEvents3Hosts: from pacerctl campaign pause (or resume)
// returning to the last of three pacerd processes answering SPEND
// accordingly. Reports p50, p99 and the worst in milliseconds.
func BenchmarkOperatorEvents3Hosts(b *testing.B) {
	f := startEventFleet(b)
	var lat []time.Duration
	pause := true
	for b.Loop() {
		lat = append(lat, f.round(b, pause))
		pause = !pause
	}
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
}
