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
	"time"

	"github.com/pacer/pacer/lease"
	"go.uber.org/zap"
)

// Journal remembers the leases a daemon holds, so that after a crash the
// next run gives back exactly what the crashed one could not have spent,
// instead of the reconciler settling every held lease as wholly spent.
//
// It is an append-only file of one line per event: a grant (written before
// the lease's tokens enter the bucket) and a close (a release the ledger
// acknowledged). Each line is one write(2) with O_APPEND and no fsync: a
// process crash (SIGKILL, a panic, the OOM killer) keeps what the kernel
// has, which is what matters; a machine crash loses the file's tail, and
// the leases it named are settled by the reconciler as before.
//
// What a crashed run could not have spent is what its bucket had not
// dripped yet: a lease's tokens become spendable only along its drip
// schedule, so at any instant after the crash the undripped part of each
// lease is a lower bound on its unused micros. Reclaim releases exactly that.
//
// A Journal is safe for concurrent use. Only one daemon may use a journal
// file at a time (systemd runs one pacerd per host).
type Journal struct {
	mu     sync.Mutex
	path   string
	f      *os.File
	open   map[string]JournalLease
	closed int // close lines since the file was last compacted
	log    *zap.Logger
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

// compactAfter is how many close lines the journal accumulates before it is
// rewritten with only the open leases.
const compactAfter = 4096

// OpenJournal opens (creating it if need be) the journal at path, and
// returns it with the leases a previous run left open.
func OpenJournal(path string, log *zap.Logger) (*Journal, []JournalLease, error) {
	if log == nil {
		log = zap.NewNop()
	}
	j := &Journal{path: path, open: map[string]JournalLease{}, log: log.Named("journal")}
	if err := j.load(); err != nil {
		return nil, nil, err
	}
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
	j.f, j.closed = f, 0
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
	if j.closed++; j.closed >= compactAfter {
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
func (d *Daemon) Reclaim(ctx context.Context, j *Journal, left []JournalLease) (int64, error) {
	now := d.cfg.Clock.Now()
	var back int64
	var errs []error
	for _, jl := range left {
		if !j.isOpen(jl.ID) {
			continue // reclaimed already
		}
		unused := jl.Unspendable(now)
		cctx, cancel := context.WithTimeout(ctx, d.cfg.LedgerTimeout)
		_, err := d.ledger.Release(cctx, jl.Key, jl.ID, unused, now)
		cancel()
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
