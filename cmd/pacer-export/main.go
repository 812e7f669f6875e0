// Command pacer-export copies the Redis ledger's audit streams into
// PostgreSQL, exactly once (package export), and trims the streams below
// what it exported. Run "pacer-export help" for the commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pacer/pacer/export"
	"github.com/pacer/pacer/lease"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// version is set at build time: -ldflags "-X main.version=…".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "pacer-export:", err)
		}
		os.Exit(1)
	}
}

const usageText = `pacer-export: the spend ledger in PostgreSQL

Usage:
  pacer-export [flags] [run]      export every audit stream, every --interval, until stopped
  pacer-export [flags] migrate    apply the schema's migrations and exit
  pacer-export [flags] replay --campaign ID --day YYYY-MM-DD [--from STREAM-ID]
                                  re-export a campaign-day from a stream id (default: its start);
                                  rows already in PostgreSQL are skipped
  pacer-export [flags] backfill --campaign ID --day YYYY-MM-DD
                                  complete a day whose streams lost entries before they were
                                  exported (a trimmed gap) from its shards' report counters
  pacer-export [flags] drop-group retire --group on every stream (its streams are trimmed
                                  or capped without it again)
  pacer-export version

Flags:
`

// options are the command line.
type options struct {
	redisAddrs, redisPasswordFile string
	dsn                           string
	metrics                       string
	cfg                           export.Config
	campaign, day, from           string
}

// defaultMetrics is the loopback admin listener for /metrics.
const defaultMetrics = "127.0.0.1:9465"

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (options, []string, error) {
	var o options
	fs := flagSet(&o, getenv, stderr)
	if err := fs.Parse(args); err != nil {
		return o, nil, err
	}
	return o, fs.Args(), nil
}

// flagSet defines the command line's flags on o (docs/EXPORT.md's table
// lists them; a test checks its defaults against these).
func flagSet(o *options, getenv func(string) string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("pacer-export", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usageText); fs.PrintDefaults() }
	host, _ := os.Hostname()
	fs.StringVar(&o.redisAddrs, "redis", orDefault(getenv("PACER_REDIS"), "127.0.0.1:6379"), "the Redis ledger, as pacerd's ledger.redis (host:port, a socket path, sentinel://…, Cluster seeds); default $PACER_REDIS")
	fs.StringVar(&o.redisPasswordFile, "redis-password-file", "", "file holding the Redis password (default: $PACER_REDIS_PASSWORD)")
	fs.StringVar(&o.dsn, "sql", getenv("PACER_SQL"), "PostgreSQL DSN (postgres://user@host/db, or key=value; passwords from ~/.pgpass or $PGPASSFILE); default $PACER_SQL")
	fs.StringVar(&o.metrics, "metrics", defaultMetrics, "address of the /metrics listener (empty: none)")
	fs.StringVar(&o.cfg.Group, "group", "pacer-export", "consumer group: one per database")
	fs.StringVar(&o.cfg.Consumer, "consumer", orDefault(host, "pacer-export"), "this exporter's name in the group (default: the host name)")
	fs.Int64Var(&o.cfg.Batch, "batch", 1000, "entries per read and per transaction of a stream that is caught up")
	fs.Int64Var(&o.cfg.MaxBatch, "max-batch", export.DefaultMaxBatch, "entries per read and per transaction of a stream that is behind (a full read doubles the next, up to this)")
	fs.IntVar(&o.cfg.BatchesPerPass, "batches-per-pass", 50, "batches one stream may take per pass before the next stream's turn (and at most this × --batch entries)")
	fs.IntVar(&o.cfg.Streams, "streams", export.DefaultStreams, "streams exported at once, each on a PostgreSQL connection of its own")
	fs.DurationVar(&o.cfg.Interval, "interval", export.DefaultInterval, "time between passes")
	fs.DurationVar(&o.cfg.ClaimIdle, "claim-idle", time.Minute, "take over entries another exporter holds unacknowledged for this long")
	fs.BoolVar(&o.cfg.NoTrim, "no-trim", false, "do not trim the streams (a second group whose database is not the record)")
	fs.StringVar(&o.campaign, "campaign", "", "replay, backfill: the campaign")
	fs.StringVar(&o.day, "day", "", "replay, backfill: the day")
	fs.StringVar(&o.from, "from", "-", "replay: the first stream id")
	return fs
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	o, rest, err := parseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	cmd := "run"
	if len(rest) > 0 {
		cmd = rest[0]
	}
	if len(rest) > 1 {
		return fmt.Errorf("unexpected arguments after %s: %q", cmd, rest[1:])
	}
	switch cmd {
	case "version":
		fmt.Fprintln(stdout, "pacer-export", version)
		return nil
	case "help":
		fmt.Fprint(stdout, usageText)
		return nil
	case "run", "migrate", "replay", "backfill", "drop-group":
	default:
		return fmt.Errorf("unknown command %q (run, migrate, replay, backfill, drop-group, version)", cmd)
	}
	if o.dsn == "" {
		return errors.New("no database: give --sql DSN or set PACER_SQL")
	}
	db, err := openDB(ctx, o.dsn, o.cfg.Streams)
	if err != nil {
		return err
	}
	defer db.Close()
	if cmd == "migrate" {
		v, err := export.Migrate(ctx, db)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "schema at version %d\n", v)
		return nil
	}
	if err := export.CheckSchema(ctx, db); err != nil {
		return err
	}
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(stderr), zap.InfoLevel))
	defer log.Sync()
	rdb, err := redisClient(o, getenv)
	if err != nil {
		return err
	}
	defer rdb.Close()
	ledger := lease.New(rdb, lease.Config{}, log)
	switch cmd {
	case "replay":
		return replay(ctx, o, export.New(rdb, ledger, db, o.cfg, nil, log), stdout)
	case "backfill":
		return backfill(ctx, o, export.New(rdb, ledger, db, o.cfg, nil, log), stdout)
	case "drop-group":
		n, err := export.New(rdb, ledger, db, o.cfg, nil, log).DropGroup(ctx)
		if err == nil {
			fmt.Fprintf(stdout, "group %s dropped from %d streams\n", o.cfg.Group, n)
		}
		return err
	}
	return serve(ctx, o, rdb, ledger, db, log)
}

func openDB(ctx context.Context, dsn string, streams int) (*pgxpool.Pool, error) {
	db, err := export.NewPool(ctx, dsn, streams)
	if err != nil {
		return nil, fmt.Errorf("--sql: %w", err)
	}
	if err := db.Ping(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("--sql: %w", err)
	}
	return db, nil
}

func redisClient(o options, getenv func(string) string) (redis.UniversalClient, error) {
	opt := lease.ClientOptions{Password: getenv("PACER_REDIS_PASSWORD")}
	if o.redisPasswordFile != "" {
		b, err := os.ReadFile(o.redisPasswordFile)
		if err != nil {
			return nil, fmt.Errorf("--redis-password-file: %w", err)
		}
		opt.Password = strings.TrimSpace(string(b))
	}
	return lease.NewClientWith(strings.Split(o.redisAddrs, ","), opt)
}

func replay(ctx context.Context, o options, e *export.Exporter, stdout io.Writer) error {
	if o.campaign == "" || o.day == "" {
		return errors.New("replay: give --campaign and --day")
	}
	in, dup, err := e.Replay(ctx, o.campaign, o.day, o.from)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s/%s from %s: %d rows written, %d already there\n", o.campaign, o.day, o.from, in, dup)
	return nil
}

func backfill(ctx context.Context, o options, e *export.Exporter, stdout io.Writer) error {
	if o.campaign == "" || o.day == "" {
		return errors.New("backfill: give --campaign and --day")
	}
	n, err := e.Backfill(ctx, o.campaign, o.day)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s/%s: %d shards backfilled from their counters\n", o.campaign, o.day, n)
	return nil
}

// serve runs the exporter until ctx is done, with /metrics on o.metrics,
// and tells systemd it is ready once the schema checked and the listener is up.
func serve(ctx context.Context, o options, rdb redis.UniversalClient, ledger *lease.Ledger, db *pgxpool.Pool, log *zap.Logger) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := export.NewMetrics(reg)
	if o.metrics != "" {
		ln, err := net.Listen("tcp", o.metrics)
		if err != nil {
			return fmt.Errorf("--metrics: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
	}
	_, _ = daemon.SdNotify(false, daemon.SdNotifyReady)
	log.Info("exporting", zap.String("group", o.cfg.Group), zap.String("consumer", o.cfg.Consumer))
	return export.New(rdb, ledger, db, o.cfg, m, log).Run(ctx)
}
