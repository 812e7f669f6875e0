package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacer/pacer/lease"
	"go.uber.org/zap"
)

// Journal remembers the leases a daemon holds, so that after a crash the
// next run gives back exactly what the crashed one could not have spent,
// instead of the reconciler settling every held lease as wholly spent.
//
// It is an append-only file of one line per event: a grant (written before
// the lease's tokens enter the bucket), a close (a release the ledger
// acknowledged), and a fence (an instant the writer decides no SPEND
// beyond, see Fence). Each line is one write(2) with O_APPEND and no fsync: a
// process crash (SIGKILL, a panic, the OOM killer) keeps what the kernel
// has, which is what matters; a machine crash loses the file's tail, and
// the leases it named are settled by the reconciler as before.
//
// What a crashed run could not have spent is what its bucket had not
// dripped yet: a lease's tokens become spendable only along its drip
// schedule, so at any instant no earlier than the crashed run's last SPEND
// the undripped part of each lease is a lower bound on its unused micros.
// Reclaim releases exactly that, at the journal's last fence (or later):
// never at the restarted run's clock alone, which may be behind.
//
// A Journal is safe for concurrent use. Only one daemon may use a journal
// file at a time (Open locks its StateDir).
type Journal struct {
	mu    sync.Mutex
	path  string
	f     *os.File
	open  map[string]JournalLease
	stale int // close and fence lines since the file was last compacted
	log   *zap.Logger
	// fence is the latest fence recorded (unix ns), by this run or a
	// previous one; 0: none. Written under mu, read without it by Covers.
	fence atomic.Int64
	// boot is this machine's boot id ("" if unknown); wroteBoot is the one
	// the file named when opened. whole: the fence bounds the last SPEND of
	// every run whose leases are open, so the file may name this boot
	// (bootWritten: it does, since the last compaction).
	boot, wroteBoot    string
	whole, bootWritten bool
}

// JournalLease is a lease as the journal remembers it.
type JournalLease struct {
	ID     string
	Key    lease.ShardKey
	Amount int64
	// DripStart and DripEnd are the bucket's drip schedule for the lease.
	DripStart, DripEnd time.Time
	// Expiry is the lease's expiry in the ledger.
	Expiry time.Time
}

// Unspendable returns the part of the lease that a bucket following its
// drip schedule had not dripped by now: floor-exact, as the bucket computes
// it, so it never exceeds what was undripped at any earlier instant.
func (jl JournalLease) Unspendable(now time.Time) int64 {
	switch {
	case !now.After(jl.DripStart):
		return jl.Amount
	case !now.Before(jl.DripEnd):
		return 0
	}
	elapsed := big.NewInt(now.Sub(jl.DripStart).Nanoseconds())
	window := big.NewInt(jl.DripEnd.Sub(jl.DripStart).Nanoseconds())
	dripped := new(big.Int).Mul(big.NewInt(jl.Amount), elapsed)
	dripped.Quo(dripped, window)
	return jl.Amount - dripped.Int64()
}

// compactAfter is how many close and fence lines the journal accumulates
// before it is rewritten with only the open leases and the last fence.
const compactAfter = 4096

// OpenJournal opens (creating it if need be) the journal at path, and
// returns it with the leases a previous run left open.
func OpenJournal(path string, log *zap.Logger) (*Journal, []JournalLease, error) {
	if log == nil {
		log = zap.NewNop()
	}
	j := &Journal{path: path, open: map[string]JournalLease{}, log: log.Named("journal"), boot: machineBoot()}
	if err := j.load(); err != nil {
		return nil, nil, err
	}
	// A file written under another boot may have lost its tail, fences
	// with it: its leases wait for Reclaim's conservative instant.
	j.whole = len(j.open) == 0 || j.boot != "" && j.wroteBoot == j.boot
	left := make([]JournalLease, 0, len(j.open))
	for _, jl := range j.open {
		left = append(left, jl)
	}
	if err := j.compact(); err != nil {
		return nil, nil, err
	}
	return j, left, nil
}

func (j *Journal) load() error {
	f, err := os.Open(j.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("lease journal: %w", err)
	}
	defer f.Close()
	r := bufio.NewReader(f)
	for n := 1; ; n++ {
		line, err := r.ReadString('\n')
		if errors.Is(err, io.EOF) {
			if line != "" {
				j.log.Warn("lease journal ends in a partial line (a crash mid-write); ignoring it", zap.String("path", j.path))
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("lease journal %s: %w", j.path, err)
		}
		if err := j.apply(strings.TrimSuffix(line, "\n")); err != nil {
			j.log.Warn("lease journal: skipping a malformed line", zap.String("path", j.path), zap.Int("line", n), zap.Error(err))
		}
	}
}

func (j *Journal) apply(line string) error {
	f := strings.Fields(line)
	switch {
	case len(f) == 2 && f[0] == "C":
		delete(j.open, f[1])
		return nil
	case len(f) == 2 && f[0] == "B":
		j.wroteBoot = f[1]
		return nil
	case len(f) == 2 && f[0] == "T":
		ns, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return fmt.Errorf("field %q: %w", f[1], err)
		}
		j.fence.Store(max(j.fence.Load(), ns))
		return nil
	case len(f) == 9 && f[0] == "G":
		var v [5]int64
		for i, s := range []string{f[5], f[6], f[7], f[8], f[4]} {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return fmt.Errorf("field %q: %w", s, err)
			}
			v[i] = n
		}
		if v[0] <= 0 || v[2] <= v[1] || v[4] < 0 || !lease.ValidCampaignID(f[2]) {
			return errors.New("out of range")
		}
		j.open[f[1]] = JournalLease{
			ID: f[1], Key: lease.ShardKey{Campaign: f[2], Day: f[3], Shard: int(v[4])}, Amount: v[0],
			DripStart: time.Unix(0, v[1]), DripEnd: time.Unix(0, v[2]), Expiry: time.UnixMilli(v[3]),
		}
		return nil
	}
	return errors.New("unknown record")
}

func grantLine(jl JournalLease) string {
	return fmt.Sprintf("G %s %s %s %d %d %d %d %d\n", jl.ID, jl.Key.Campaign, jl.Key.Day, jl.Key.Shard,
		jl.Amount, jl.DripStart.UnixNano(), jl.DripEnd.UnixNano(), jl.Expiry.UnixMilli())
}

// compact rewrites the file with only the open leases (to a temporary file,
// then renamed over it) and reopens it for appending.
func (j *Journal) compact() error {
	if err := os.MkdirAll(filepath.Dir(j.path), 0o750); err != nil {
		return fmt.Errorf("lease journal: %w", err)
	}
	tmp := j.path + ".tmp"
	var b strings.Builder
	j.bootWritten = false
	if fence := j.fence.Load(); fence != 0 {
		b.WriteString(j.bootLine() + fenceLine(fence))
	}
	for _, jl := range j.open {
		b.WriteString(grantLine(jl))
	}
	if err := os.WriteFile(tmp, []byte(b.String()), 0o640); err != nil {
		return fmt.Errorf("lease journal: %w", err)
	}
	if err := os.Rename(tmp, j.path); err != nil {
		return fmt.Errorf("lease journal: %w", err)
	}
	f, err := os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("lease journal: %w", err)
	}
	if j.f != nil {
		j.f.Close()
	}
	j.f, j.stale = f, 0
	return nil
}

// Granted records a lease before its tokens become spendable.
func (j *Journal) Granted(jl JournalLease) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return errors.New("lease journal closed")
	}
	if _, err := j.f.WriteString(grantLine(jl)); err != nil {
		return fmt.Errorf("lease journal: %w", err)
	}
	j.open[jl.ID] = jl
	return nil
}

func fenceLine(ns int64) string { return "T " + strconv.FormatInt(ns, 10) + "\n" }

// bootLine returns the line naming this boot if the file should have it
// and does not yet (at most once per compaction), or "".
func (j *Journal) bootLine() string {
	if !j.whole || j.bootWritten || j.boot == "" {
		return ""
	}
	j.bootWritten = true
	return "B " + j.boot + "\n"
}

// fenceLead is how far ahead of its clock a journal's writer records its
// fence: Fence writes a new one (now + fenceLead) once less than half of
// it is left, about three lines a second at the default tick. What a crash
// costs beyond the dead run's last SPEND is the drip of at most fenceLead.
const fenceLead = 500 * time.Millisecond

// Fence is the journal's promise about its writer's clock: the journal
// records an instant (a "T" line) before its writer decides any SPEND at a
// later instant, so the latest fence in the file is never earlier than the
// last SPEND of the run that wrote it, however that run died (Reclaim
// relies on this). The refill loop calls Fence at every tick; a SPEND
// calls Extend when Covers says its instant is past the fence (a refill
// loop stalled on a slow ledger), so the promise holds without a loop
// that keeps time.
func (j *Journal) Fence(now time.Time) {
	if now.UnixNano() < j.fence.Load()-int64(fenceLead/2) {
		return // more than half the lead left: no write this tick
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.raise(now.Add(fenceLead).UnixNano())
	if j.stale >= compactAfter && j.f != nil {
		if err := j.compact(); err != nil {
			j.log.Warn("lease journal: compaction failed", zap.Error(err))
		}
	}
}

// Covers reports whether a SPEND at now is within the fence: one atomic
// load, the only cost on the hot path.
func (j *Journal) Covers(now time.Time) bool { return now.UnixNano() <= j.fence.Load() }

// Extend records a fence fenceLead past now, unless one is there already.
func (j *Journal) Extend(now time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.raise(now.Add(fenceLead).UnixNano())
}

// raise records the fence ns (unix ns) if it is past the last one; under
// mu. A fence that cannot be written is kept in memory, so that a broken
// disk does not make every SPEND write: the journal then no longer bounds
// what a crash followed by a clock stepped back gives back, as a grant it
// cannot record is no longer reclaimed.
func (j *Journal) raise(ns int64) {
	if ns <= j.fence.Load() || j.f == nil {
		return
	}
	if _, err := j.f.WriteString(j.bootLine() + fenceLine(ns)); err != nil {
		j.log.Warn("lease journal: cannot record the clock's fence", zap.Error(err))
	}
	j.stale++
	j.fence.Store(ns)
}

// reclaimedAt records that the open leases of previous runs are taken at
// at (Reclaim's instant): the fence is raised to it, and from then on it
// bounds their last SPENDs whatever boot wrote them.
func (j *Journal) reclaimedAt(at time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.whole = true
	j.raise(at.UnixNano())
	if line := j.bootLine(); line != "" && j.f != nil {
		if _, err := j.f.WriteString(line); err != nil {
			j.log.Warn("lease journal: cannot record the boot", zap.Error(err))
		}
	}
}

// machineBoot returns the id the kernel draws at each boot of this machine,
// or "" where it has none. Like the pid, it is the process's fact, not
// configuration: a journal written under another one was written before a
// machine crash or reboot, which may have lost its tail.
func machineBoot() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// fenceBounds reports whether the last fence bounds the last SPEND of every
// run whose leases are open: the file was written since this machine booted
// (the kernel kept every line through a process crash), or Reclaim raised
// the fence to its own instant.
func (j *Journal) fenceBounds() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.whole
}

// LastFence returns the latest fence the journal recorded, by this run or
// a previous one, or the zero time.
func (j *Journal) LastFence() time.Time {
	if ns := j.fence.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// Closed records that the ledger acknowledged a lease's release (or that it
// was settled): nothing is left to reclaim.
func (j *Journal) Closed(id string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.open[id]; !ok || j.f == nil {
		return
	}
	delete(j.open, id)
	if _, err := j.f.WriteString("C " + id + "\n"); err != nil {
		j.log.Warn("lease journal: cannot record a close; a restart may release the lease again (a no-op)", zap.Error(err))
	}
	if j.stale++; j.stale >= compactAfter {
		if err := j.compact(); err != nil {
			j.log.Warn("lease journal: compaction failed", zap.Error(err))
		}
	}
}

func (j *Journal) isOpen(id string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	_, ok := j.open[id]
	return ok
}

// Close closes the file.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}

// Reclaim releases the leases a previous run left open, each with its
// undripped part as unused (the rest counts as spent), before the
// reconciler would settle them as wholly spent. Leases the ledger has
// settled, forgotten or whose day is gone are dropped; those it could not
// reach stay in the journal for the next run, and the reconciler settles
// them meanwhile. It returns the micros given back.
//
// The journal replay never gives back what its predecessor dripped: each
// lease's undripped part is taken at reclaimInstant, never earlier than the
// predecessor's last clock reading, whatever this run's clock says.
func (d *Daemon) Reclaim(ctx context.Context, j *Journal, left []JournalLease) (int64, error) {
	now := d.cfg.Clock.Now()
	at := d.reclaimInstant(now, j)
	// Leases kept for a later run are taken at this instant too.
	j.reclaimedAt(at)
	var back int64
	var errs []error
	for _, jl := range left {
		if !j.isOpen(jl.ID) {
			continue // reclaimed already
		}
		unused := jl.Unspendable(at)
		err := d.reclaimOne(ctx, jl, unused, now)
		switch {
		case err == nil:
			back += unused
			j.Closed(jl.ID)
			d.log.Info("reclaimed a lease left by the previous run", zap.Stringer("shard", jl.Key),
				zap.String("lease", jl.ID), zap.Int64("amount", jl.Amount), zap.Int64("unused", unused))
		case errors.Is(err, lease.ErrLeaseSettled), errors.Is(err, lease.ErrUnknownLease), errors.Is(err, lease.ErrDayNotOpen):
			j.Closed(jl.ID)
		default:
			errs = append(errs, err)
		}
	}
	return back, errors.Join(errs...)
}

// reclaimInstant is the instant at which Reclaim takes what the previous
// runs had not dripped. It is never earlier than the last SPEND of the run
// that died, so a clock stepped back cannot make a restart give back micros
// its predecessor dripped, and maybe spent, for the ledger to grant again:
//
//   - after a process crash, the journal's last fence: no SPEND was decided
//     beyond it (see Journal.Fence), whatever either run's clock said, and
//     the kernel kept every line written. At most fenceLead past the dead
//     run's last SPEND, it costs a crash the drip of that much at most.
//   - after a machine crash (the file was written under another boot), or
//     with a journal without fences, from an older pacerd: the tail may be
//     lost, fences with it, so the later of the last fence and now +
//     2×SkewBound. Both runs' clocks are within SkewBound of Redis TIME
//     (the ledger gate refuses a daemon beyond it), and the dead run's
//     last reading came before this run's start, so it was at most Redis's
//     TIME then + SkewBound ≤ Redis's TIME now + SkewBound ≤
//     now + 2×SkewBound.
func (d *Daemon) reclaimInstant(now time.Time, j *Journal) time.Time {
	fence := j.LastFence()
	if j.fenceBounds() && !fence.IsZero() {
		return fence
	}
	if at := now.Add(2 * d.cfg.SkewBound); at.After(fence) {
		return at
	}
	return fence
}

// reclaimOne releases a lease the previous run left, with unused micros
// back. A lease the ledger does not know was forgotten (Redis lost the
// writes that granted it) while the previous run spent from it: it is
// re-asserted first, as a release that finds its lease unknown does
// (tryRelease), so that the part its clients spent is counted spent.
func (d *Daemon) reclaimOne(ctx context.Context, jl JournalLease, unused int64, now time.Time) error {
	cctx, cancel := context.WithTimeout(ctx, d.cfg.LedgerTimeout)
	defer cancel()
	_, err := d.ledger.Release(cctx, jl.Key, jl.ID, unused, now)
	if !errors.Is(err, lease.ErrUnknownLease) {
		return err
	}
	got, _, rerr := d.ledger.Reassert(cctx, jl.Key, lease.LeaseRecord{ID: jl.ID, Amount: jl.Amount, Holder: d.cfg.Holder, Expiry: jl.Expiry}, now)
	if rerr != nil {
		return rerr
	}
	if got == lease.Rerecorded {
		d.counters.leasesReasserted.Add(1)
		d.log.Warn("re-asserted a lease the previous run held and the ledger forgot", zap.Stringer("shard", jl.Key),
			zap.String("lease", jl.ID), zap.Int64("amount", jl.Amount))
	}
	_, err = d.ledger.Release(cctx, jl.Key, jl.ID, unused, now)
	return err
}
