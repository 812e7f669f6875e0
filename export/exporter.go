// Package export owns the spend ledger in PostgreSQL: it copies every shard's
// audit stream from the Redis ledger into ledger_events exactly once, keeps
// per campaign-day and per hour totals in the same transactions, trims the
// streams below what was exported, detects what it could not export (gaps),
// and compares its totals with the ledger's counters (Reconcile).
//
// Exactly once: each shard's stream is read through a consumer group
// (XREADGROUP; XAUTOCLAIM takes over what a dead consumer held). A batch's
// rows, the totals they add and the stream's cursor (the highest id
// exported) are one transaction; rows are keyed by stream and entry id, so an
// entry delivered again (a crash between COMMIT and XACK, two exporters, a
// replay) inserts nothing and adds nothing. An entry is acknowledged only
// after its commit, and only acknowledged entries are trimmed (lease's
// TrimAudit), so a crash at any point neither loses nor duplicates.
package export

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Config tunes an Exporter. The zero value is usable, with Consumer set.
type Config struct {
	// Group is the consumer group every exporter of one database shares
	// (default "pacer-export"). A second database is a second group: each
	// stream is trimmed only below what every group acknowledged.
	Group string
	// Consumer names this exporter in the group (default "pacer-export");
	// give each process its own (pacer-export uses host-pid).
	Consumer string
	// Batch is the entries a stream's first XREADGROUP of a pass reads and
	// one transaction writes (default 1000).
	Batch int64
	// MaxBatch bounds the batch of a stream that is behind (default
	// DefaultMaxBatch, never below Batch): a read that came back full is
	// followed by one twice its size, up to MaxBatch, so that a backlog is
	// written with fewer commits and round trips per event; a stream that
	// is caught up reads Batch at a time. At most Streams × MaxBatch
	// entries are held in memory at once.
	MaxBatch int64
	// BatchesPerPass bounds what one stream gets per pass, so that a stream
	// with a backlog does not starve the others: BatchesPerPass batches and
	// BatchesPerPass × Batch entries, whichever comes first (default 50).
	BatchesPerPass int
	// Streams is how many streams a pass exports at once, each batch on a
	// PostgreSQL connection of its own (default DefaultStreams): so that PostgreSQL
	// commits one stream's batch while the exporter reads and encodes
	// another's. A stream is exported by one of them at a time.
	Streams int
	// ClaimIdle is how long an entry stays delivered and unacknowledged
	// before another consumer takes it over (XAUTOCLAIM; default 1 minute).
	ClaimIdle time.Duration
	// Interval is the time between passes in Run (default
	// DefaultInterval).
	Interval time.Duration
	// NoTrim leaves the streams untrimmed (a second exporter group that must
	// not trim, or tests).
	NoTrim bool
	// Now is the clock (default time.Now): lag and the times written.
	Now func() time.Time
	// Step, if set, is called at each step of a batch's export ("read",
	// "encoded": before its transaction, "copied": its rows written in the
	// open transaction, before the totals and the cursor, "committed",
	// "acked", "trimmed"), one call at a time; an error it returns aborts the pass
	// there, as a crash would (the streams being exported at the same time
	// stop at their next step). For tests; production leaves it nil.
	Step func(ctx context.Context, step string) error
}

// The defaults of Config.Interval and Config.Streams: at the default day's
// real rate (about 20 entries a second over 134 streams) the lag is then
// the interval plus a pass, about 0.6 s at p99 on a loaded 2-core machine,
// and an idle pass over 134 streams is 289 Redis commands (docs/EXPORT.md,
// Cost).
//
// DefaultMaxBatch is where a stream that is behind stops growing its batch
// (docs/BENCHMARKS.md, Export: batch size).
const (
	DefaultInterval = 500 * time.Millisecond
	DefaultStreams  = 8
	DefaultMaxBatch = 2000
)

// Exporter copies audit streams into PostgreSQL. Pass and Run are for one
// goroutine; several Exporters (processes) may share a group and a database.
type Exporter struct {
	rdb    redis.UniversalClient
	ledger *lease.Ledger
	store  *store
	cfg    Config
	m      *Metrics
	log    *zap.Logger
}

// New returns an Exporter. m may be nil (unregistered metrics), log too.
func New(rdb redis.UniversalClient, ledger *lease.Ledger, db *pgxpool.Pool, cfg Config, m *Metrics, log *zap.Logger) *Exporter {
	if cfg.Group == "" {
		cfg.Group = "pacer-export"
	}
	if cfg.Consumer == "" {
		cfg.Consumer = "pacer-export"
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 1000
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	cfg.MaxBatch = max(cfg.MaxBatch, cfg.Batch)
	if cfg.BatchesPerPass <= 0 {
		cfg.BatchesPerPass = 50
	}
	if cfg.Streams <= 0 {
		cfg.Streams = DefaultStreams
	}
	if cfg.ClaimIdle <= 0 {
		cfg.ClaimIdle = time.Minute
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if hook := cfg.Step; hook == nil {
		cfg.Step = func(context.Context, string) error { return nil }
	} else {
		var mu sync.Mutex
		cfg.Step = func(ctx context.Context, step string) error {
			mu.Lock()
			defer mu.Unlock()
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("%w %s: %w", errStep, step, context.Cause(ctx))
			}
			if err := hook(ctx, step); err != nil {
				return fmt.Errorf("%w %s: %w", errStep, step, err)
			}
			return nil
		}
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Exporter{rdb: rdb, ledger: ledger, store: &store{db: db, step: cfg.Step, now: cfg.Now, zones: newZones(ledger)}, cfg: cfg, m: m,
		log: log.Named("export")}
}

// Run makes a pass every Interval until ctx is done. A failed pass is
// counted and logged, and the next one starts over from the cursors.
func (e *Exporter) Run(ctx context.Context) error {
	t := time.NewTicker(e.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := e.Pass(ctx); err != nil && ctx.Err() == nil {
			e.log.Warn("export pass failed", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// PassStats is what one pass did.
type PassStats struct {
	Streams    int
	Exported   int64 // rows inserted
	Duplicates int64 // entries read that were already exported
	Trimmed    int64
	Gaps       []Gap // found by this pass (new ones only)
}

// Pass exports what every stream holds beyond its cursor, and trims what was
// exported. A stream that fails stops at the failure (the next pass resumes
// it there) and the others go on; the errors are returned together.
//
// A pass that failed because a PostgreSQL connection broke (PostgreSQL
// restarted, or the network dropped) closes every idle connection of the
// pool: they are as likely dead, and the pool pings only a connection idle
// for over a second before lending it, so the next pass could fail again
// on one of them.
func (e *Exporter) Pass(ctx context.Context) (PassStats, error) {
	st, err := e.pass(ctx)
	if err != nil && connectionLost(err) {
		e.store.db.Reset()
	}
	return st, err
}

// connectionLost reports whether err says a connection broke (a network
// error, an end of stream, PostgreSQL shutting down or refusing
// connections) rather than a statement failing.
func connectionLost(err error) bool {
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57P")
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) || pgconn.SafeToRetry(err)
}

func (e *Exporter) pass(ctx context.Context) (PassStats, error) {
	var st PassStats
	streams, err := e.ledger.AuditStreams(ctx)
	if err != nil {
		e.m.Errors.WithLabelValues("redis").Inc()
		return st, err
	}
	st.Streams = len(streams)
	e.m.Streams.Set(float64(len(streams)))
	states, err := e.streamStates(ctx, streams)
	if err != nil {
		e.m.Errors.WithLabelValues("redis").Inc()
		return st, err
	}
	// The cursors are read after the streams' states: a trim seen above was
	// below what was committed before it, so below these cursors.
	cursors, err := e.store.cursors(ctx)
	if err != nil {
		e.m.Errors.WithLabelValues("sql").Inc()
		return st, err
	}
	if err := e.measureLag(ctx, states, cursors); err != nil {
		return st, err
	}
	if err := e.exportAll(ctx, states, cursors, &st); err != nil {
		return st, err
	}
	e.m.LastPass.Set(float64(e.cfg.Now().UnixNano()) / 1e9)
	return st, nil
}

// exportAll exports the streams, Config.Streams of them at once. A stream
// that fails (a malformed entry, a failed transaction) stops there until a
// later pass and the others go on; their errors are returned together. A
// Step hook's error (a crash, in tests) or ctx's end stops them all.
func (e *Exporter) exportAll(ctx context.Context, states []streamState, cursors map[lease.ShardKey]cursor, st *PassStats) error {
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var (
		mu      sync.Mutex
		errs    []error
		crashed error
		wg      sync.WaitGroup
	)
	next := make(chan streamState)
	for range e.cfg.Streams {
		wg.Go(func() {
			for s := range next {
				var one PassStats
				err := e.exportStream(ctx, s, cursors[s.k], &one)
				mu.Lock()
				st.add(one)
				switch {
				case err == nil:
				case errors.Is(err, errStep) && crashed == nil:
					crashed = err
					stop(err)
				case ctx.Err() == nil:
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		})
	}
feed:
	for _, s := range states {
		select {
		case next <- s:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if crashed != nil {
		return crashed
	}
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return errors.Join(errs...)
}

func (st *PassStats) add(o PassStats) {
	st.Exported += o.Exported
	st.Duplicates += o.Duplicates
	st.Trimmed += o.Trimmed
	st.Gaps = append(st.Gaps, o.Gaps...)
}

// streamState is what Redis says of one stream at the start of a pass.
type streamState struct {
	k       lease.ShardKey
	exists  bool
	info    redis.XInfoStream
	ours    *redis.XInfoGroup // our group, nil if not created yet
	lastGen streamID
	first   streamID // the first entry it holds (recorded-first-entry-id)
}

// streamStates reads every stream's XINFO STREAM and XINFO GROUPS in one
// pipeline.
func (e *Exporter) streamStates(ctx context.Context, ks []lease.ShardKey) ([]streamState, error) {
	p := e.rdb.Pipeline()
	infos := make([]*redis.XInfoStreamCmd, len(ks))
	groups := make([]*redis.XInfoGroupsCmd, len(ks))
	for i, k := range ks {
		infos[i] = p.XInfoStream(ctx, k.AuditKey())
		groups[i] = p.XInfoGroups(ctx, k.AuditKey())
	}
	_, _ = p.Exec(ctx) // a missing stream is an error of its own command
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]streamState, len(ks))
	for i, k := range ks {
		s := streamState{k: k}
		info, err := infos[i].Result()
		if isNoSuchKey(err) {
			out[i] = s
			continue
		}
		if err == nil && info == nil {
			err = errors.New("no reply")
		}
		if err != nil {
			return nil, fmt.Errorf("export %s: xinfo: %w", k, err)
		}
		if info.RecordedFirstEntryID == "" {
			return nil, fmt.Errorf("export %s: XINFO STREAM has no recorded-first-entry-id: the exporter needs Redis 7.0 or later", k)
		}
		s.exists, s.info = true, *info
		if s.lastGen, err = parseStreamID(info.LastGeneratedID); err != nil {
			return nil, fmt.Errorf("export %s: %w", k, err)
		}
		if s.first, err = parseStreamID(info.RecordedFirstEntryID); err != nil {
			return nil, fmt.Errorf("export %s: %w", k, err)
		}
		gs, err := groups[i].Result()
		if err != nil {
			return nil, fmt.Errorf("export %s: xinfo groups: %w", k, err)
		}
		for j := range gs {
			if gs[j].Name == e.cfg.Group {
				s.ours = &gs[j]
			}
		}
		out[i] = s
	}
	return out, nil
}

func isNoSuchKey(err error) bool {
	return err != nil && strings.Contains(err.Error(), "no such key")
}

// idle reports whether a stream has nothing for us: our group has every
// entry delivered and acknowledged.
func (s streamState) idle() bool {
	return s.ours != nil && s.ours.Pending == 0 && s.ours.LastDeliveredID == s.info.LastGeneratedID
}

// measureLag sets the lag gauges from the streams' states and cursors: how
// many entries each stream added beyond what was exported, and the age of
// the oldest of them (the first entry after each cursor, read in one
// pipeline).
func (e *Exporter) measureLag(ctx context.Context, states []streamState, cursors map[lease.ShardKey]cursor) error {
	var entries int64
	var oldest time.Duration
	now := e.cfg.Now()
	p := e.rdb.Pipeline()
	var firsts []*redis.XMessageSliceCmd
	for _, s := range states {
		c := cursors[s.k]
		if !s.exists || s.info.EntriesAdded <= c.events {
			continue
		}
		entries += s.info.EntriesAdded - c.events
		firsts = append(firsts, p.XRangeN(ctx, s.k.AuditKey(), "("+c.last.String(), "+", 1))
	}
	if len(firsts) > 0 {
		if _, err := p.Exec(ctx); err != nil {
			e.m.Errors.WithLabelValues("redis").Inc()
			return fmt.Errorf("export: lag: %w", err)
		}
	}
	for _, cmd := range firsts {
		if first := cmd.Val(); len(first) == 1 {
			if id, err := parseStreamID(first[0].ID); err == nil {
				oldest = max(oldest, now.Sub(time.UnixMilli(id.ms)))
			}
		}
	}
	e.m.LagEntries.Set(float64(entries))
	e.m.LagSeconds.Set(oldest.Seconds())
	return nil
}

// errStep wraps an error a Config.Step hook returned.
var errStep = errors.New("export: step")
