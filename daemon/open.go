package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pacer/pacer/broadcast"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Links are what Open connects a daemon to and runs beside it. New takes its
// ledger as an argument and ignores them. The caller reads files and secrets
// (package config, cmd/pacerd) and hands the results in here.
type Links struct {
	// Redis lists the ledger's addresses (see lease.ParseTarget). Open dials
	// them with lease.NewClientWith(Redis, RedisOptions), the one
	// constructor of ledger clients, and closes the client at Close.
	Redis        []string
	RedisOptions lease.ClientOptions
	// RedisClient, if set, is the ledger's client instead of one dialled
	// from Redis; Open does not close it (the simulator counts the commands
	// of a whole fleet on one client it owns).
	RedisClient redis.UniversalClient
	// Ledger configures the lease.Ledger (durability policy, retention).
	Ledger lease.Config

	// CheckLedger turns on the ledger gate (see LedgerGate): before it takes
	// a new lease, the daemon wants the ledger to meet Ledger.Durability
	// (or AssumeDurability, for a Redis that refuses CONFIG) and this host's
	// clock to be within SkewBound of Redis TIME. Open runs the checks once
	// and refuses to open on a Redis that does not meet the policy, a clock
	// off by more than SkewBound, or credentials Redis refuses; a Redis it
	// cannot reach yet only keeps the gate closed. The checks are re-run
	// every CheckInterval (default 10s) and on every redial.
	CheckLedger      bool
	AssumeDurability *lease.Durability
	CheckInterval    time.Duration

	// StateDir, if set, holds the lease journal (leases.journal) and its
	// spent map (leases.spent): Open gives back to the ledger what the
	// previous run's leases held unspent and re-asserts that run's totals
	// (Reclaim), and Close closes the journal. A StateDir belongs to one daemon: Open
	// locks it (pacerd.lock, with the holder's pid in it) until Close, and
	// refuses a StateDir another daemon holds (ErrStateDirInUse).
	StateDir string

	// NATS, if set, is the URL (or comma-separated URLs) of the broadcasts:
	// Open connects with NATSOptions, publishes this daemon's news there
	// (unless Config.Publisher is set) and acts on the fleet's.
	NATS        string
	NATSOptions broadcast.Options

	// ManualStep leaves the refill loop to the caller, who calls Step (the
	// simulator and tests, on a clock they move). Otherwise Open runs it
	// every TickInterval until Close.
	ManualStep bool
}

// opened is what Open started beside a Daemon, for Close to stop and close.
type opened struct {
	rdb     redis.UniversalClient
	ownRDB  bool
	gate    *LedgerGate
	journal *Journal
	lock    *os.File // StateDir's lock, held until close
	bc      *broadcast.Broadcaster
	stop    context.CancelFunc
	loops   sync.WaitGroup
	once    sync.Once
}

// Open assembles a running daemon from cfg, in the manner of gubernator's
// SpawnDaemon: the ledger's Redis client and lease.Ledger, the ledger gate,
// the lease journal (and what a crash of the previous run left in it), the
// NATS broadcaster, the Daemon, and its refill loop. ctx bounds the start
// only (the first ledger check and the reclaim); what Open starts runs
// until Close, which stops and awaits every goroutine it started, releases
// the leases, then closes the journal, the broadcaster and the client.
//
// The bidder socket (transport.Server), the reconciler's election, the
// admin listener and systemd's notifications stay with the caller: they are
// the process's, not the daemon's (a listener path and mode, an etcd
// session, readiness), and the simulator and tests want a daemon without
// them. No import cycle forbids them here.
func Open(ctx context.Context, cfg Config) (_ *Daemon, err error) {
	ln := cfg.Links
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	o := &opened{rdb: ln.RedisClient}
	defer func() {
		if err != nil {
			o.close()
		}
	}()
	if o.rdb == nil {
		if len(ln.Redis) == 0 {
			return nil, errors.New("daemon: Open needs Links.Redis or Links.RedisClient")
		}
		if o.rdb, err = lease.NewClientWith(ln.Redis, ln.RedisOptions); err != nil {
			return nil, fmt.Errorf("redis: %w", err)
		}
		o.ownRDB = true
	}
	ledger := lease.New(o.rdb, ln.Ledger, log)
	if ln.CheckLedger {
		o.gate = newDurabilityGate(o.rdb, ln, cfg.LedgerTimeout, log)
		if cfg.LedgerGate == nil {
			cfg.LedgerGate = o.gate.Err
		}
	}
	var leftover []JournalLease
	if ln.StateDir != "" {
		if o.lock, err = lockStateDir(ln.StateDir); err != nil {
			return nil, err
		}
		if o.journal, leftover, err = OpenJournal(filepath.Join(ln.StateDir, "leases.journal"), log); err != nil {
			return nil, err
		}
		if cfg.Journal == nil {
			cfg.Journal = o.journal
		}
	}
	if ln.NATS != "" {
		if o.bc, err = broadcast.ConnectWith(ln.NATS, ln.NATSOptions); err != nil {
			return nil, err
		}
		if cfg.Publisher == nil {
			cfg.Publisher = o.bc
		}
	}
	d, err := New(ledger, cfg)
	if err != nil {
		return nil, err
	}
	if o.gate != nil {
		o.gate.Add("clock", d.CheckClock)
		if err := firstLedgerCheck(ctx, o.gate, o.rdb, ln, d.cfg.LedgerTimeout, log); err != nil {
			return nil, err
		}
	}
	if o.journal != nil {
		// Also with no lease left: the previous runs' totals are re-asserted.
		back, err := d.Reclaim(ctx, o.journal, leftover)
		d.log.Info("gave back what the previous run's leases held unspent", zap.Int("leases", len(leftover)),
			zap.Int64("micros", back), zap.Error(err))
	}
	if o.bc != nil {
		if err := o.bc.Subscribe(d.HandleEvent); err != nil {
			return nil, err
		}
	}
	var loopCtx context.Context
	loopCtx, o.stop = context.WithCancel(context.Background())
	if !ln.ManualStep {
		o.loops.Go(func() { _ = d.Run(loopCtx) })
	}
	if o.gate != nil {
		o.loops.Go(func() { _ = o.gate.Run(loopCtx) })
	}
	d.opened = o
	return d, nil
}

// stopLoops stops the refill loop and the gate's, if Open started them, and
// waits for them: Close releases leases only once no Step can take more.
func (o *opened) stopLoops() {
	if o.stop != nil {
		o.stop()
	}
	o.loops.Wait()
}

// close stops the loops and closes what Open opened, once.
func (o *opened) close() {
	o.once.Do(func() {
		o.stopLoops()
		if o.journal != nil {
			o.journal.Close()
		}
		if o.lock != nil {
			o.lock.Close() // releases the flock
		}
		if o.bc != nil {
			o.bc.Close()
		}
		if o.ownRDB && o.rdb != nil {
			o.rdb.Close()
		}
	})
}

// Ledger returns the ledger the daemon leases from (pacerd's reconciler
// settles on it).
func (d *Daemon) Ledger() *lease.Ledger { return d.ledger }

// Broadcaster returns the NATS broadcaster Open connected, or nil (its
// statistics are exported by pacerd's admin listener).
func (d *Daemon) Broadcaster() *broadcast.Broadcaster {
	if d.opened == nil {
		return nil
	}
	return d.opened.bc
}

// newDurabilityGate returns the ledger gate with the durability check in it
// (Open adds the clock check once the daemon exists).
func newDurabilityGate(rdb redis.UniversalClient, ln Links, timeout time.Duration, log *zap.Logger) *LedgerGate {
	gate := NewLedgerGate(GateConfig{Interval: ln.CheckInterval, Timeout: timeout, Logger: log})
	lease.OnDial(rdb, gate.Recheck) // a restarted or failed-over Redis is re-checked at once
	want, assume := ln.Ledger.Durability, ln.AssumeDurability
	gate.Add("durability", func(ctx context.Context) error {
		_, err := lease.CheckDurability(ctx, rdb, want, assume)
		return err
	})
	return gate
}

// ErrRefused marks an error with which Open refused to start on a ledger
// check: a Redis that does not meet the durability policy, a clock off by
// more than the skew bound, or credentials or a certificate Redis refuses.
// No wait fixes them.
var ErrRefused = errors.New("refusing to start")

// ErrStateDirInUse marks Open's refusal of a StateDir another daemon holds.
var ErrStateDirInUse = errors.New("state_dir in use by another pacerd")

// stateLockFile is the file in a StateDir whose flock says which process
// owns the directory.
const stateLockFile = "pacerd.lock"

// lockStateDir takes an exclusive flock on dir's lock file, held while the
// returned file stays open (the kernel drops it when the process dies,
// however it dies, so a SIGKILLed run never leaves it stale), and writes
// this process's pid in it. The journal in dir must have one writer: a
// second daemon would read the first's live leases as a dead run's and
// give back their undripped part while the first still spends it. A dir
// another daemon holds is refused, naming the dir and the holder's pid.
func lockStateDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("state_dir: %w", err)
	}
	path := filepath.Join(dir, stateLockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("state_dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		pid, _ := io.ReadAll(io.LimitReader(f, 32))
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked by pid %s (%s): stop that pacerd, or give this one its own state_dir",
				ErrStateDirInUse, dir, strings.TrimSpace(string(pid)), path)
		}
		return nil, fmt.Errorf("state_dir: lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// firstLedgerCheck runs the gate's checks once before the daemon serves. A
// Redis that does not meet the policy, or a clock beyond the skew bound,
// refuses the start with the check's error (it names the fix). A Redis that
// cannot be reached yet does not: the daemon starts with the gate closed
// (degraded mode: no leases) and opens it once a check passes.
func firstLedgerCheck(ctx context.Context, gate *LedgerGate, rdb redis.UniversalClient, ln Links, timeout time.Duration, log *zap.Logger) error {
	err := gate.Check(ctx)
	if errors.Is(err, lease.ErrNotDurable) || errors.Is(err, lease.ErrClockSkew) {
		return fmt.Errorf("%w: %w", ErrRefused, err)
	}
	// Credentials Redis refuses, or a certificate that does not verify, are
	// a configuration error no wait fixes: without this, the daemon would
	// report ready and deny every SPEND.
	if lease.IsAuthError(err) {
		return fmt.Errorf("%w: %w", ErrRefused, lease.CheckAuth(err))
	}
	if err != nil {
		log.Warn("cannot check the ledger yet; taking no leases until it can be checked", zap.Error(err))
		return nil
	}
	// Passed: say what was verified, and what was only assumed.
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rep, err := lease.CheckDurability(cctx, rdb, ln.Ledger.Durability, ln.AssumeDurability)
	if err != nil {
		return nil // the gate's own checks decide; this is only the log
	}
	for _, w := range rep.Warnings {
		log.Warn("ledger durability: "+w, zap.String("policy", rep.Policy))
	}
	for _, n := range rep.Nodes {
		log.Info("ledger durability verified", zap.String("policy", rep.Policy), zap.Stringer("redis", n))
	}
	return nil
}

// LedgerCheck returns what the daemon asks before every new lease
// (Config.LedgerGate, or the gate Open built), or nil. pacerd's reconciler
// asks it too before it settles.
func (d *Daemon) LedgerCheck() func(context.Context) error { return d.cfg.LedgerGate }
