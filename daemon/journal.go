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
// It is an append-only file of one line per event: an ask (A, written
// before a grant or renewal call names its new lease id: a crash, or a
// call whose answer is lost, may leave the ledger holding a lease nobody
// fed into a bucket, which the next run or tick gives back whole), a grant
// (G, written before the lease's tokens enter the bucket; it answers the
// ask), a close (C: a release the ledger acknowledged, with the micros it
// took back, or a settlement, or an ask answered with nothing), a
// fence (T: an instant the writer decides no SPEND beyond, see Fence), the
// machine boot it was written under (B), what a Reclaim decided to give
// back of a dead run's leases of one campaign-day (U, one line before any
// of them is released), a run's totals on a shard-day carried over a
// compaction (R), and that a run's totals were re-asserted (D). Each line
// is one write(2) with O_APPEND and no fsync: a process crash (SIGKILL, a
// panic, the OOM killer) keeps what the kernel has, which is what matters;
// a machine crash loses the file's tail, and the leases it named are
// settled by the reconciler as before.
//
// Beside the file, the spent map (spentlog.go; the journal's path with the
// extension .spent) records what every campaign-day's bucket let SPENDs
// take, net of refunds, and each lease's state, with one plain store per
// SPEND: what a dead run's open leases held unspent is then known
// exactly (Reclaim). Without the map (a machine crash may lose its pages,
// so a map written under another boot is not trusted), what a crashed run
// could not have spent is what its bucket had not dripped yet: a lease's
// tokens become spendable only along its drip schedule, so at any instant
// no earlier than the crashed run's last SPEND the undripped part of each
// lease is a lower bound on its unused micros. Reclaim then releases
// exactly that, at the journal's last fence (or later): never at the
// restarted run's clock alone, which may be behind.
//
// The journal also keeps each run's totals on each shard-day (micros the
// ledger granted it, micros it took back), so that a restarted daemon can
// re-assert its predecessors' (Reclaim): what their clients spent stays
// counted if the ledger lost writes while nobody watched.
//
// A Journal is safe for concurrent use. Only one daemon may use a journal
// file at a time (Open locks its StateDir; the spent map is locked too).
type Journal struct {
	mu   sync.Mutex
	path string
	f    *os.File
	open map[string]JournalLease
	// asked: leases asked for and not answered yet (A lines without a G or
	// C line): nothing of them can have been spent.
	asked map[string]JournalAsk
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

	// spent is the spent map; nil: none (Reclaim falls back to the
	// undripped rule).
	spent *spentMap
	// shares: what a Reclaim decided to give back of the open leases of
	// dead runs (U lines), until their release is recorded.
	shares map[string]reclaimShare
	// totals: each run's totals on each shard-day, as the ledger
	// acknowledged them: granted (G lines) and taken back (C lines).
	totals map[runShard]lease.History
}

// runShard is a run (holder-boot, its lease ids' prefix) on a shard-day.
type runShard struct {
	run string
	key lease.ShardKey
}

// leaseRun returns the run of a lease id (holder-boot-seq): holder-boot.
func leaseRun(id string) string {
	if i := strings.LastIndexByte(id, '-'); i >= 0 {
		return id[:i]
	}
	return ""
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

// JournalAsk is a lease asked for whose answer the journal has not seen.
type JournalAsk struct {
	ID     string
	Key    lease.ShardKey
	Expiry time.Time // the lease's, had it been granted
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

// OpenJournal opens (creating it if need be) the journal at path and its
// spent map, and returns it with the leases a previous run left open.
func OpenJournal(path string, log *zap.Logger) (*Journal, []JournalLease, error) {
	if log == nil {
		log = zap.NewNop()
	}
	j := &Journal{path: path, open: map[string]JournalLease{}, asked: map[string]JournalAsk{}, log: log.Named("journal"), boot: machineBoot(),
		shares: map[string]reclaimShare{}, totals: map[runShard]lease.History{}}
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
	spent, err := openSpentMap(spentPath(path), j.log)
	if err != nil {
		j.log.Warn("no spent map: a crash gives back only what its leases had not dripped", zap.Error(err))
	} else {
		j.spent = spent
		j.dropSpent()
	}
	return j, left, nil
}

// spentPath is the spent map's path beside a journal's: its extension
// replaced by .spent (leases.journal: leases.spent).
func spentPath(journal string) string {
	return strings.TrimSuffix(journal, filepath.Ext(journal)) + ".spent"
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
	case (len(f) == 2 || len(f) == 3) && f[0] == "C":
		var returned int64
		if len(f) == 3 {
			n, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil || n < 0 {
				return fmt.Errorf("field %q: out of range", f[2])
			}
			returned = n
		}
		j.answerAsk(f[1], returned)
		j.closeLease(f[1], returned)
		return nil
	case len(f) >= 4 && (len(f)-1)%3 == 0 && f[0] == "U":
		return j.applyShares(f[1:])
	case len(f) == 7 && f[0] == "R":
		return j.applyTotals(f[1:])
	case len(f) == 2 && f[0] == "D":
		// A previous release marked runs a successor had re-asserted, and
		// skipped them at later starts; every start re-asserts them now.
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
	case len(f) == 6 && f[0] == "A":
		return j.applyAsk(f[1:])
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
		j.opened(JournalLease{
			ID: f[1], Key: lease.ShardKey{Campaign: f[2], Day: f[3], Shard: int(v[4])}, Amount: v[0],
			DripStart: time.Unix(0, v[1]), DripEnd: time.Unix(0, v[2]), Expiry: time.UnixMilli(v[3]),
		})
		return nil
	}
	return errors.New("unknown record")
}

// applyAsk reads an A line: id campaign day shard expiry_ms.
func (j *Journal) applyAsk(f []string) error {
	shard, err := strconv.Atoi(f[3])
	if err != nil || shard < 0 || !lease.ValidCampaignID(f[1]) {
		return errors.New("out of range")
	}
	ms, err := strconv.ParseInt(f[4], 10, 64)
	if err != nil {
		return fmt.Errorf("field %q: %w", f[4], err)
	}
	j.asked[f[0]] = JournalAsk{ID: f[0], Key: lease.ShardKey{Campaign: f[1], Day: f[2], Shard: shard}, Expiry: time.UnixMilli(ms)}
	return nil
}

func askLine(a JournalAsk) string {
	return fmt.Sprintf("A %s %s %s %d %d\n", a.ID, a.Key.Campaign, a.Key.Day, a.Key.Shard, a.Expiry.UnixMilli())
}

// opened notes an open lease and counts it in its run's totals; under mu.
// It answers the lease's ask.
func (j *Journal) opened(jl JournalLease) {
	delete(j.asked, jl.ID)
	if _, dup := j.open[jl.ID]; dup {
		return
	}
	j.open[jl.ID] = jl
	rs := runShard{leaseRun(jl.ID), jl.Key}
	h := j.totals[rs]
	h.Granted += jl.Amount
	j.totals[rs] = h
}

// closeLease notes a lease closed, the ledger having taken back returned
// micros of it; under mu. It reports whether the lease was open.
func (j *Journal) closeLease(id string, returned int64) bool {
	jl, ok := j.open[id]
	if !ok {
		return false
	}
	delete(j.open, id)
	delete(j.shares, id)
	rs := runShard{leaseRun(id), jl.Key}
	h := j.totals[rs]
	h.Returned += min(returned, jl.Amount)
	j.totals[rs] = h
	return true
}

// answerAsk notes the answer to a lease asked for; under mu. An ask
// closed with returned > 0 was granted by the ledger and given back whole,
// unfed (a call whose answer was lost: resolveAsk, reclaimAsks): its run's
// totals count it granted and returned, as the ledger's count it. The
// invariant ReassertRun relies on: a run's journaled totals count every
// grant and release its shard counted, less what the shard lost. A shard
// compares them field by field (reassert_run), so totals that left out a
// grant given back whole would hide, up to its size, a later grant the
// shard lost and the micros spent from it (model seed 1489).
func (j *Journal) answerAsk(id string, returned int64) {
	a, ok := j.asked[id]
	if !ok {
		return
	}
	delete(j.asked, id)
	if returned <= 0 {
		return
	}
	rs := runShard{leaseRun(id), a.Key}
	h := j.totals[rs]
	h.Granted += returned
	h.Returned += returned
	j.totals[rs] = h
}

// applyShares reads a U line's (id, unused, exact) triplets.
func (j *Journal) applyShares(f []string) error {
	for i := 0; i+2 < len(f); i += 3 {
		n, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil || n < 0 || (f[i+2] != "0" && f[i+2] != "1") {
			return fmt.Errorf("share %q %q: out of range", f[i+1], f[i+2])
		}
		j.shares[f[i]] = reclaimShare{unused: n, exact: f[i+2] == "1"}
	}
	return nil
}

// applyTotals reads an R line: run campaign day shard granted returned.
func (j *Journal) applyTotals(f []string) error {
	var v [3]int64
	for i, s := range f[3:] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("field %q: out of range", s)
		}
		v[i] = n
	}
	if !lease.ValidCampaignID(f[1]) {
		return errors.New("out of range")
	}
	rs := runShard{f[0], lease.ShardKey{Campaign: f[1], Day: f[2], Shard: int(v[0])}}
	h := j.totals[rs]
	h.Granted += v[1]
	h.Returned += v[2]
	j.totals[rs] = h
	return nil
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
	j.writeTotals(&b)
	for _, jl := range j.open {
		b.WriteString(grantLine(jl))
	}
	for _, a := range j.asked {
		b.WriteString(askLine(a))
	}
	j.writeShares(&b)
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

// writeTotals writes an R line for each run's totals on a shard-day, less
// its leases still open (their G lines count them), and forgets the totals
// no later run needs: those of runs re-asserted, and of days two days
// before the last fence, once no lease of theirs is open; under mu.
func (j *Journal) writeTotals(b *strings.Builder) {
	openAmount := map[runShard]int64{}
	for _, jl := range j.open {
		openAmount[runShard{leaseRun(jl.ID), jl.Key}] += jl.Amount
	}
	cutoff := ""
	if fence := j.fence.Load(); fence != 0 {
		cutoff = time.Unix(0, fence).UTC().Add(-48 * time.Hour).Format(time.DateOnly)
	}
	// A run's totals are kept until their day is past, re-asserted or not:
	// a restore after a successor re-asserted them may take that away, and
	// they are re-asserted again then (every start, and runTotals.inherit).
	for rs, h := range j.totals {
		held, isOpen := openAmount[rs]
		if !isOpen && rs.key.Day < cutoff {
			delete(j.totals, rs)
			continue
		}
		if granted := h.Granted - held; granted > 0 || h.Returned > 0 {
			fmt.Fprintf(b, "R %s %s %s %d %d %d\n", rs.run, rs.key.Campaign, rs.key.Day, rs.key.Shard, granted, h.Returned)
		}
	}
}

// writeShares writes Reclaim's decisions for the leases still open, a line
// per campaign-day of a run; under mu.
func (j *Journal) writeShares(b *strings.Builder) {
	groups := map[spentKey][]string{}
	for id := range j.shares {
		if jl, ok := j.open[id]; ok {
			k := spentKeyOf(jl)
			groups[k] = append(groups[k], id)
		} else {
			delete(j.shares, id)
		}
	}
	for _, ids := range groups {
		b.WriteString(sharesLine(ids, j.shares))
	}
}

// sharesLine is the U line of Reclaim's decisions for ids.
func sharesLine(ids []string, shares map[string]reclaimShare) string {
	var b strings.Builder
	b.WriteString("U")
	for _, id := range ids {
		exact := 0
		if shares[id].exact {
			exact = 1
		}
		fmt.Fprintf(&b, " %s %d %d", id, shares[id].unused, exact)
	}
	b.WriteString("\n")
	return b.String()
}

// Asked records a lease asked for, before the call that may grant it.
func (j *Journal) Asked(a JournalAsk) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return errors.New("lease journal closed")
	}
	if _, err := j.f.WriteString(askLine(a)); err != nil {
		return fmt.Errorf("lease journal: %w", err)
	}
	j.asked[a.ID] = a
	j.stale++
	return nil
}

// Asks returns the leases asked for whose answer the journal has not seen:
// by a previous run, which died during the call, or by this one, when the
// call's answer was lost (Daemon.resolveAsks).
func (j *Journal) Asks() []JournalAsk {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]JournalAsk, 0, len(j.asked))
	for _, a := range j.asked {
		out = append(out, a)
	}
	return out
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
	j.opened(jl)
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

// Closed records that a lease is closed without saying what the ledger took
// back of it (Released with 0): nothing is left to reclaim.
func (j *Journal) Closed(id string) { j.Released(id, 0) }

// Released records that the ledger acknowledged a lease's release, taking
// back returned of its micros (0 if it was settled as spent): nothing is
// left to reclaim, and the spent map forgets the lease. Of a lease asked
// for and never granted (or granted and given back before it was fed), it
// records the answer.
func (j *Journal) Released(id string, returned int64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	jl, ok := j.open[id]
	_, asked := j.asked[id]
	if !ok && !asked || j.f == nil {
		return
	}
	j.answerAsk(id, returned)
	j.closeLease(id, returned)
	if _, err := j.f.WriteString("C " + id + " " + strconv.FormatInt(max(returned, 0), 10) + "\n"); err != nil {
		j.log.Warn("lease journal: cannot record a close; a restart may release the lease again (a no-op)", zap.Error(err))
	}
	if seq, isSeq := leaseSeq(id); ok && isSeq && j.spent != nil {
		j.spent.released(spentKeyOf(jl), seq)
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

// Close closes the file and the spent map: the buckets recording into it
// stop (a daemon still spending records nothing more).
func (j *Journal) Close() error {
	j.mu.Lock()
	var err error
	if j.f != nil {
		err = j.f.Close()
		j.f = nil
	}
	spent := j.spent
	j.mu.Unlock()
	if spent != nil {
		err = errors.Join(err, spent.close())
	}
	return err
}

// Reclaim releases the leases previous runs left open, giving back what
// they held unspent, before the reconciler would settle them as wholly
// spent; then it re-asserts those runs' totals on their shard-days
// (lease.Ledger.ReassertRun), counting what it gave back as returned, so
// that if the ledger lost writes while no daemon watched, what their
// clients spent is counted spent. Leases the ledger has settled, forgotten
// or whose day is gone are dropped; those it could not reach stay in the
// journal for the next run, and the reconciler settles them meanwhile. It
// returns the micros given back.
//
// What it gives back never exceeds what the dead runs' clients left
// unspent (allowed less refunded, as the buckets counted them), and per
// campaign-day of a run it is exactly that when the spent map has the
// campaign-day (see planReclaim): Σ granted − Σ spent, the tokens the
// buckets held and their undripped reserve, nothing more. Where the map
// cannot say (no slot, one marked untrusted, a map written under another
// machine boot), each lease gives back what had not dripped by
// reclaimInstant, never earlier than the predecessor's last clock reading,
// whatever this run's clock says.
func (d *Daemon) Reclaim(ctx context.Context, j *Journal, left []JournalLease) (int64, error) {
	now := d.cfg.Clock.Now()
	asked, askErr := d.reclaimAsks(ctx, j, now)
	at := d.reclaimInstant(now, j)
	// Leases kept for a later run are taken at this instant too.
	j.reclaimedAt(at)
	shares, err := j.planReclaim(left, at)
	errs := []error{askErr, err}
	back := asked
	for _, jl := range left {
		sh, ok := shares[jl.ID]
		if !ok || !j.isOpen(jl.ID) {
			continue // reclaimed already, or its decision could not be journaled
		}
		given, err := d.reclaimLease(ctx, j, jl, sh, now)
		back += given
		errs = append(errs, err)
	}
	j.dropSpent()
	errs = append(errs, d.reassertPrevious(ctx, j, now))
	return back, errors.Join(errs...)
}

// reclaimLease releases one lease a previous run left open with sh.unused
// unused, and returns what it gave back.
func (d *Daemon) reclaimLease(ctx context.Context, j *Journal, jl JournalLease, sh reclaimShare, now time.Time) (int64, error) {
	cctx, cancel := context.WithTimeout(ctx, d.cfg.LedgerTimeout)
	_, err := d.ledger.Release(cctx, jl.Key, jl.ID, sh.unused, now)
	cancel()
	switch {
	case err == nil:
		// An undripped figure may repeat a release whose close line a crash
		// lost, which the ledger answers with its first figure: it is not
		// counted as returned in the run's totals.
		returned := int64(0)
		if sh.exact {
			returned = sh.unused
		}
		j.Released(jl.ID, returned)
		d.log.Info("reclaimed a lease left by the previous run", zap.Stringer("shard", jl.Key),
			zap.String("lease", jl.ID), zap.Int64("amount", jl.Amount), zap.Int64("unused", sh.unused), zap.Bool("exact", sh.exact))
		return sh.unused, nil
	case errors.Is(err, lease.ErrUnknownLease):
		// The ledger forgot the grant (a restore: a lease is in the shard's
		// leases or done for the rest of its day), and so the shard's
		// totals for the run lack it. Its share, never more than it held
		// unspent, is counted returned: the run's totals then count as
		// consumed what its clients spent from it, which reassertPrevious
		// charges (a lease counted granted and not returned would charge
		// all of it).
		j.Released(jl.ID, sh.unused)
		d.log.Warn("a lease left by the previous run is unknown to the ledger (it lost writes); its spent part is re-asserted with the run's totals",
			zap.Stringer("shard", jl.Key), zap.String("lease", jl.ID), zap.Int64("amount", jl.Amount), zap.Int64("unused", sh.unused))
		return 0, nil
	case errors.Is(err, lease.ErrLeaseSettled), errors.Is(err, lease.ErrDayNotOpen):
		j.Closed(jl.ID)
		return 0, nil
	}
	return 0, err
}

// reassertPrevious re-asserts the totals of every run before this one that
// the journal keeps (yesterday's and today's) on each shard-day they leased
// from, after Reclaim gave back what they left: a no-op where the ledger is
// not behind them. Those an earlier start re-asserted are re-asserted
// again: a restore since may have taken that re-assertion away, and no
// running daemon may have seen it (TestRestartReassertsTheDeadRunsTotals,
// "restarted again"). They are kept for a later loss too (runTotals).
//
// Each shard's history as the re-assertion's reply gave it (seq and tip,
// after the re-assertion's write if it wrote) becomes this run's known
// history of the shard, taken by the day's first load here (openDay), so
// that the run's first lease call there is checked against it. The rule:
// a restore that takes away what the start re-asserted (or the inherited
// writes it found current) sends the shard back before that seq, so the
// run's first grant, renewal or release there after it finds the history
// diverged before granting anything, and lostWrites re-asserts the
// inherited totals again (seed 13536: a second restore took the start's
// re-assertion away and the new run was granted the same budget again).
// Without it, that call passed only the run's own totals, none yet, and
// the loss waited for the idle check.
func (d *Daemon) reassertPrevious(ctx context.Context, j *Journal, now time.Time) error {
	var errs []error
	current := d.cfg.Holder + "-" + d.bootID
	for run, shards := range j.previousRuns(current) {
		for k, tot := range shards {
			d.ran.inherit(run, k, tot)
			cctx, cancel := context.WithTimeout(ctx, d.cfg.LedgerTimeout)
			added, sh, err := d.ledger.ReassertRun(cctx, k, run, tot, now)
			cancel()
			if err == nil && sh.Seq > 0 && !sh.Diverged {
				d.ran.saw(k, sh.History())
			}
			switch {
			case errors.Is(err, lease.ErrDayNotOpen):
			case err != nil:
				errs = append(errs, fmt.Errorf("re-assert the totals of run %s on %s: %w", run, k, err))
			case added > 0:
				d.log.Warn("re-asserted what a previous run's clients spent from leases the ledger forgot", zap.String("run", run),
					zap.Stringer("shard", k), zap.Int64("granted", tot.Granted), zap.Int64("returned", tot.Returned), zap.Int64("spent_added", added))
			}
		}
	}
	return errors.Join(errs...)
}

// previousRuns returns the totals of the runs other than current, by run
// and shard-day.
func (j *Journal) previousRuns(current string) map[string]map[lease.ShardKey]lease.History {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := map[string]map[lease.ShardKey]lease.History{}
	for rs, h := range j.totals {
		if rs.run == "" || rs.run == current || h.Granted <= 0 || h.Returned > h.Granted {
			continue
		}
		if out[rs.run] == nil {
			out[rs.run] = map[lease.ShardKey]lease.History{}
		}
		out[rs.run][rs.key] = h
	}
	return out
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
