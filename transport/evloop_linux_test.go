package transport

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestLoopYield: a loop yields its P at most once per loopYieldEvery of its
// own clock readings, and at once after a wait that long.
func TestLoopYield(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	yields := 0
	y := loopYield{last: t0, yield: func() { yields++ }}
	steps := []struct {
		at   time.Duration // after t0
		want int           // yields so far
	}{
		{0, 0},
		{time.Millisecond, 0},
		{loopYieldEvery - time.Nanosecond, 0},
		{loopYieldEvery, 1},
		{loopYieldEvery + time.Millisecond, 1},
		{2*loopYieldEvery - time.Nanosecond, 1},
		{2 * loopYieldEvery, 2},
		{time.Second, 3}, // a long wait: one yield, not one per interval missed
		{time.Second + loopYieldEvery/2, 3},
		{time.Second + loopYieldEvery, 4},
	}
	for _, s := range steps {
		y.maybe(t0.Add(s.at))
		if yields != s.want {
			t.Fatalf("at t0+%v: %d yields, want %d", s.at, yields, s.want)
		}
	}
}

// TestLoopYieldInterval: the interval must stay well under the runtime's
// forcePreemptNS (10 ms), or sysmon preempts the loop between yields.
func TestLoopYieldInterval(t *testing.T) {
	if loopYieldEvery <= 0 || loopYieldEvery > 5*time.Millisecond {
		t.Fatalf("loopYieldEvery = %v, want within (0, 5ms]", loopYieldEvery)
	}
}

// TestHybridBatches: socket_server hybrid answers many busy connections at
// once through its ring, byte for byte as each asked: pipelined PINGs of
// 1 byte to 60 KB, more of them than a socket buffer holds (so sends
// complete in part and finish through flush), written in odd chunks, mixed
// with SPENDs
// (the first of a campaign on a connection is handed to a helper
// goroutine). It fails if no wake-up went through the ring (unless
// PACER_TEST_NO_URING says io_uring is unavailable).
func TestHybridBatches(t *testing.T) {
	ts := startServer(t, newFakeSpender(), ServerConfig{Server: Hybrid})
	const conns, requests = 16, 150
	var wg sync.WaitGroup
	errs := make(chan error, 2*conns)
	for i := range conns {
		c := dialRaw(t, ts.path)
		rng := rand.New(rand.NewPCG(uint64(i), 15))
		reqs := make([]string, requests)
		want := make([]string, requests)
		for j := range reqs {
			if j%50 == 7 {
				reqs[j], want[j] = resp("SPEND", "demo", "1"), ":1\r\n"
				continue
			}
			size := 1 + rng.IntN(300)
			if j%10 == 3 {
				// Near the request limit: a few pipelined
				// fill the socket, so sends complete in part.
				size = 30_000 + rng.IntN(30_000)
			}
			msg := strings.Repeat(string(rune('a'+i%26)), size)
			reqs[j], want[j] = resp("PING", msg), fmt.Sprintf("$%d\r\n%s\r\n", size, msg)
		}
		wg.Add(2)
		go func() { // the writer, in chunks of up to 4 KB
			defer wg.Done()
			all := []byte(strings.Join(reqs, ""))
			for len(all) > 0 {
				n := min(len(all), 1+rng.IntN(4096))
				if _, err := c.Write(all[:n]); err != nil {
					errs <- fmt.Errorf("conn %d: write: %w", i, err)
					return
				}
				all = all[n:]
			}
		}()
		go func() {
			defer wg.Done()
			for j := range want {
				got, err := c.reply()
				if err != nil || got != want[j] {
					errs <- fmt.Errorf("conn %d request %d: %d bytes %.40q, %v; want %d bytes %.40q", i, j, len(got), got, err, len(want[j]), want[j])
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	ts.mu.Lock()
	loops := ts.loops
	ts.mu.Unlock()
	if loops[0].batch == nil {
		if os.Getenv("PACER_TEST_NO_URING") != "" {
			t.Skip("io_uring unavailable: served by epoll alone, as the replies above show")
		}
		t.Fatal("socket_server hybrid runs without its ring: io_uring unavailable here (see the server's log); set PACER_TEST_NO_URING=1 to accept that")
	}
	if loops[0].batch.batches.Load() == 0 {
		t.Error("no wake-up was served through the ring")
	}
}
