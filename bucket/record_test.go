package bucket

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// tally is a Recorder that keeps what a successor would read: each feed's
// amount while open, and its Unused once closed.
type tally struct {
	net          int64
	open         map[string]int64
	closedSpent  int64
	closedAmount int64
	events       int
}

var _ Recorder = (*tally)(nil)

func (r *tally) FeedOpened(id string, amount int64) {
	r.open[id] = amount
	r.events++
}

func (r *tally) FeedClosed(c Closed) {
	if _, ok := r.open[c.ID]; !ok {
		panic(fmt.Sprintf("closed feed %q never opened", c.ID))
	}
	delete(r.open, c.ID)
	r.closedSpent += c.Amount - c.Unused
	r.closedAmount += c.Amount
	r.events++
}

// held is what the record says the open feeds hold unspent.
func (r *tally) held() int64 {
	var sum int64
	for _, a := range r.open {
		sum += a
	}
	return sum - (r.net - r.closedSpent)
}

// A recorded bucket's copy of its accounts says, at every step of a random
// schedule of grants, spends, refunds, closes and revokes, exactly what the
// bucket holds unspent (Tokens + Reserve): Σ open Amount − (net − Σ closed
// (Amount − Unused)). A bucket stops recording on StopRecording (only when
// idle, if asked so) and then takes no grant; it cannot start once it has
// had a grant.
func TestRecordedAccountsMatchTheBucket(t *testing.T) {
	for seed := range uint64(50) {
		r := rand.New(rand.NewPCG(seed, 7))
		b := New(int64(r.IntN(5_000) + 1))
		rec := &tally{open: map[string]int64{}}
		if err := b.Record(&rec.net, rec); err != nil {
			t.Fatal(err)
		}
		now, n := t0, 0
		for step := range 400 {
			now = now.Add(time.Duration(r.IntN(3000)) * time.Millisecond)
			switch op := r.IntN(10); {
			case op < 2:
				n++
				_ = b.AddGrant(now, Grant{ID: fmt.Sprint("g", n), Amount: int64(r.IntN(20_000) + 1),
					Start: now.Add(-time.Duration(r.IntN(5)) * time.Second), End: now.Add(time.Duration(r.IntN(30)+1) * time.Second)})
			case op < 7:
				b.Spend(now, int64(r.IntN(2_000)+1))
			case op < 8:
				b.Refund(now, int64(r.IntN(2_000)+1))
			case op < 9:
				b.Expire(now)
			default:
				if r.IntN(10) == 0 {
					b.Revoke(now)
				}
			}
			st := b.Stats(now)
			if got, want := rec.held(), st.Tokens+st.Reserve; got != want {
				t.Fatalf("seed %d step %d: the record says %d held unspent, the bucket %d (%+v)", seed, step, got, want, st)
			}
			if got, want := rec.net, st.Spent-st.Refunded; got != want {
				t.Fatalf("seed %d step %d: net %d, the bucket's spent − refunded %d", seed, step, got, want)
			}
		}
		if !b.StopRecording(now.Add(time.Hour)) {
			t.Fatalf("seed %d: an idle bucket did not stop recording", seed)
		}
		events, before := rec.events, rec.net
		if err := b.AddGrant(now.Add(time.Hour), Grant{ID: "after", Amount: 1_000, Start: now, End: now.Add(2 * time.Hour)}); !errors.Is(err, ErrRecordingStopped) {
			t.Fatalf("seed %d: a grant after recording stopped: %v, want ErrRecordingStopped", seed, err)
		}
		b.Spend(now.Add(time.Hour), 1)
		b.Refund(now.Add(time.Hour), 1)
		b.Expire(now.Add(3 * time.Hour))
		if rec.net != before || rec.events != events {
			t.Fatalf("seed %d: a bucket that stopped recording still reports", seed)
		}
	}
}

func TestRecordRefusesABucketWithGrants(t *testing.T) {
	b := New(1_000)
	if err := b.AddGrant(t0, Grant{ID: "g", Amount: 1_000, Start: t0, End: t0.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	var net int64
	if err := b.Record(&net, &tally{open: map[string]int64{}}); !errors.Is(err, ErrRecorded) {
		t.Fatalf("Record after a grant: %v, want ErrRecorded", err)
	}
	busy := New(1_000)
	rec := &tally{open: map[string]int64{}}
	if err := busy.Record(&net, rec); err != nil {
		t.Fatal(err)
	}
	if err := busy.AddGrant(t0, Grant{ID: "g", Amount: 1_000, Start: t0, End: t0.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if busy.StopRecording(t0.Add(time.Second)) {
		t.Fatal("a bucket with a feed open stopped recording when asked to stop only if idle")
	}
	if !busy.StopRecording(time.Time{}) {
		t.Fatal("StopRecording without an instant did not stop")
	}
	if err := busy.Record(&net, rec); !errors.Is(err, ErrRecorded) {
		t.Fatalf("Record after StopRecording: %v, want ErrRecorded", err)
	}
}
