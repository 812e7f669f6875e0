package transport

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacer/pacer"
)

// clockedFake is a ClockedSpender over fakeSpender whose clock counts its
// readings and moves a second at each; SpendAt records the instants it is
// given. SpendAt of campaign "late" says it decided an hour later, as the
// daemon does after loading a campaign.
type clockedFake struct {
	*fakeSpender
	mu    sync.Mutex
	t     time.Time
	reads int
	at    []time.Time
}

var _ ClockedSpender = (*clockedFake)(nil)

func (f *clockedFake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	f.t = f.t.Add(time.Second)
	return f.t
}

func (f *clockedFake) SpendAt(now time.Time, id pacer.CampaignID, amount pacer.Micros, auctionID string) (pacer.Decision, time.Time, error) {
	f.mu.Lock()
	f.at = append(f.at, now)
	f.mu.Unlock()
	if id == "late" {
		return Allowed, now.Add(time.Hour), nil
	}
	dec, err := f.fakeSpender.Spend(id, amount, auctionID)
	return dec, now, err
}

func (f *clockedFake) readings() (int, []time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads, append([]time.Time(nil), f.at...)
}

// TestBatchClock: pipelined SPENDs of one batch share a clock reading, at
// most BatchClockUses of them; any other command in between, which may
// wait on the Spender, makes the next SPEND read the clock again; and an
// instant SpendAt reports (after waiting itself) is what the SPENDs after
// it use. (Each case is one write, which a Unix socket delivers to one
// read, so one batch.)
func TestBatchClock(t *testing.T) {
	f := &clockedFake{fakeSpender: newFakeSpender(), t: time.Unix(1_700_000_000, 0)}
	f.tokens["late"] = 1 << 40
	ts := startServer(t, f, ServerConfig{})
	c := dialRaw(t, ts.path)
	// Answer each campaign once, so that the batches below are not split
	// by the event loops' hand-off of a campaign's first request.
	for _, id := range []string{"demo", "late"} {
		c.do(t, resp("SPEND", id, "1"))
	}
	batch := func(reqs ...string) (int, []time.Time) {
		t.Helper()
		r0, at0 := f.readings()
		if _, err := c.Write([]byte(strings.Join(reqs, ""))); err != nil {
			t.Fatal(err)
		}
		for range reqs {
			if _, err := c.reply(); err != nil {
				t.Fatal(err)
			}
		}
		r1, at1 := f.readings()
		return r1 - r0, at1[len(at0):]
	}
	spend := resp("SPEND", "demo", "1")

	reqs := make([]string, BatchClockUses+4)
	for i := range reqs {
		reqs[i] = spend
	}
	if reads, at := batch(reqs...); reads != 2 || len(at) != len(reqs) || at[0] != at[BatchClockUses-1] || at[BatchClockUses] == at[0] {
		t.Errorf("%d pipelined SPENDs: %d clock readings, instants %v; want 2 readings, the first %d SPENDs at one instant",
			len(reqs), reads, at, BatchClockUses)
	}
	if reads, at := batch(spend, resp("BALANCE", "demo"), spend); reads != 2 || len(at) != 2 || at[0] == at[1] {
		t.Errorf("SPEND BALANCE SPEND: %d readings, instants %v; want 2 readings, 2 instants", reads, at)
	}
	if reads, at := batch(spend, resp("SPEND", "late", "1"), spend); reads != 1 || len(at) != 3 || at[2] != at[1].Add(time.Hour) {
		t.Errorf("SPEND SPEND(late) SPEND: %d readings, instants %v; want 1 reading, the last SPEND an hour after it", reads, at)
	}
}
