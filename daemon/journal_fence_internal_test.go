package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/lease"
)

// The journal's fence: written ahead of the clock by half a lead at a time,
// kept across a compaction, and trusted by Reclaim only where the kernel
// kept the file whole (a process crash). After a machine crash (another
// boot id), or with a journal an older pacerd wrote (no fence), Reclaim
// takes now + 2×SkewBound, or the fence if later; once it has, the file
// names this boot and a fence no earlier than that instant.
func TestJournalFence(t *testing.T) {
	if machineBoot() == "" {
		t.Fatal("no /proc/sys/kernel/random/boot_id: the journal's fence needs Linux's boot id")
	}
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	path := filepath.Join(t.TempDir(), "leases.journal")
	j, _, err := OpenJournal(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	k := lease.ShardKey{Campaign: "c", Day: "2026-11-21", Shard: 0}
	if err := j.Granted(JournalLease{ID: "h-1", Key: k, Amount: 1_000, DripStart: t0, DripEnd: t0.Add(29 * time.Second), Expiry: t0.Add(30 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		at, want time.Duration // the refill loop's tick, the fence after it
	}{
		{0, 500 * time.Millisecond},
		{200 * time.Millisecond, 500 * time.Millisecond}, // more than half the lead left: no write
		{300 * time.Millisecond, 800 * time.Millisecond},
		{5 * time.Second, 5500 * time.Millisecond},
	} {
		j.Fence(t0.Add(step.at))
		if got := j.LastFence(); !got.Equal(t0.Add(step.want)) {
			t.Fatalf("fence after a tick at +%v: %v; want +%v", step.at, got.Sub(t0), step.want)
		}
	}
	if !j.Covers(t0.Add(5500*time.Millisecond)) || j.Covers(t0.Add(5501*time.Millisecond)) {
		t.Fatal("Covers: a SPEND up to the fence is covered, none after it")
	}
	j.Extend(t0.Add(6 * time.Second)) // a SPEND past the fence, the loop stalled
	j.Close()
	fence := t0.Add(6500 * time.Millisecond)
	d := &Daemon{cfg: Config{LeaseTiming: LeaseTiming{SkewBound: time.Second}}}
	behind := fence.Add(-1400 * time.Millisecond)

	j, _ = reopen(t, path, nil)
	if got := d.reclaimInstant(behind, j); !got.Equal(fence) {
		t.Errorf("after a process crash: reclaim at %v; want the fence %v", got, fence)
	}
	j.Close()

	j, _ = reopen(t, path, func(s string) string { return strings.Replace(s, "B "+machineBoot(), "B another-boot", 1) })
	if got, want := d.reclaimInstant(behind, j), behind.Add(2*time.Second); !got.Equal(want) {
		t.Errorf("after a machine crash: reclaim at %v; want now + 2×SkewBound %v", got, want)
	}
	if got := d.reclaimInstant(fence.Add(-3*time.Second), j); !got.Equal(fence) {
		t.Errorf("after a machine crash, a clock 3 s behind: reclaim at %v; want the fence %v, which is later", got, fence)
	}
	j.reclaimedAt(behind.Add(2 * time.Second))
	j.Close()
	j, data := reopen(t, path, nil)
	if !j.fenceBounds() || !j.LastFence().Equal(behind.Add(2*time.Second)) || !strings.HasPrefix(data, "B "+machineBoot()+"\n") {
		t.Errorf("after a reclaim: fence %v (bounds %v), file %q; want this boot and the reclaim's instant", j.LastFence(), j.fenceBounds(), data)
	}
	j.Close()

	j, _ = reopen(t, path, func(s string) string { // an older pacerd's journal: no boot, no fence
		return s[strings.Index(s, "G "):]
	})
	defer j.Close()
	if got, want := d.reclaimInstant(behind, j), behind.Add(2*time.Second); !got.Equal(want) {
		t.Errorf("a journal without fences: reclaim at %v; want now + 2×SkewBound %v", got, want)
	}
}

// reopen rewrites the journal at path with edit (if not nil), opens it as a
// restart does, and returns it with the file as compacted.
func reopen(t *testing.T, path string, edit func(string) string) (*Journal, string) {
	t.Helper()
	if edit != nil {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(edit(string(data))), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	j, left, err := OpenJournal(path, nil)
	if err != nil || len(left) != 1 {
		t.Fatalf("reopen: %v leases left, %v", len(left), err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return j, string(data)
}
