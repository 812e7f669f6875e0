// Command pacerd is the budget-pacing daemon: it answers bidders' SPEND calls
// on a local Unix socket from in-memory token buckets fed by leases from the
// Redis ledger.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/config"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/reconcile"
	"github.com/pacer/pacer/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// version is set at build time: -ldflags "-X main.version=…".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "pacerd:", err)
		os.Exit(1)
	}
}

// secrets is where pacerd reads passwords, keys and certificates from.
var secrets = config.Secrets{ReadFile: os.ReadFile, Getenv: os.Getenv}

// errUsage marks an error already explained by the flag package.
var errUsage = errors.New("usage")

// options are pacerd's command line.
type options struct {
	configPath string
	overrides  map[string]string
	version    bool
	pprof      bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fl := flag.NewFlagSet("pacerd", flag.ContinueOnError)
	fl.SetOutput(stderr)
	o := options{overrides: map[string]string{}}
	fl.StringVar(&o.configPath, "config", "", "YAML config `file` (see configs/pacerd.example.yaml); defaults apply without one")
	fl.BoolVar(&o.version, "version", false, "print the version and exit")
	fl.BoolVar(&o.pprof, "pprof", false, "serve /debug/pprof/ on the admin listener, which must be a Unix socket")
	for _, f := range []struct{ name, usage string }{
		{"socket", "Unix socket `path` for bidders (overrides socket:)"},
		{"redis", "Redis `addr[,addr…]`: host:port, a Unix socket path, sentinel://master@host:port,…, or Cluster seeds (overrides redis:)"},
		{"etcd", "etcd `url[,url…]` for the reconciler election (overrides etcd:)"},
		{"nats", "NATS `url` for broadcasts (overrides nats:)"},
		{"admin", "admin listener `address` for metrics and health: loopback host:port, or unix:/path; empty disables (overrides admin:)"},
		{"holder", "this daemon's `name` in lease records (overrides holder:; default: host name)"},
		{"curves", "pacing curves `dir` (overrides curves_dir:)"},
		{"state-dir", "`dir` where the daemon remembers its campaigns across restarts (overrides state_dir:)"},
		{"log-format", "log `format`: json or console (overrides log.format:)"},
	} {
		fl.Func(f.name, f.usage, func(v string) error { o.overrides[f.name] = v; return nil })
	}
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			// Asked for: the flag package printed the usage; not an error.
			return o, err
		}
		return o, errUsage
	}
	if fl.NArg() == 1 && fl.Arg(0) == "version" {
		o.version = true
		return o, nil
	}
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "pacerd: unexpected argument %q\n", fl.Arg(0))
		return o, errUsage
	}
	return o, nil
}

// loadConfig reads the config file (if any) and applies flag overrides.
func loadConfig(o options) (config.Daemon, error) {
	cfg := config.DefaultDaemon()
	if o.configPath != "" {
		data, err := os.ReadFile(o.configPath)
		if err != nil {
			return cfg, err
		}
		if cfg, err = config.ParseDaemon(data); err != nil {
			return cfg, fmt.Errorf("%s: %w", o.configPath, err)
		}
	}
	list := func(v string) []string {
		var out []string
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		return out
	}
	for k, v := range o.overrides {
		switch k {
		case "socket":
			cfg.Socket = v
		case "redis":
			cfg.Redis = list(v)
		case "etcd":
			cfg.Etcd = list(v)
		case "nats":
			cfg.NATS = v
		case "admin":
			cfg.Admin = v
		case "holder":
			cfg.Holder = v
		case "curves":
			cfg.CurvesDir = v
		case "state-dir":
			cfg.StateDir = v
		case "log-format":
			cfg.Log.Format = v
		}
	}
	if cfg.Holder == "" {
		h, err := os.Hostname()
		if err != nil {
			return cfg, fmt.Errorf("no holder name given and no host name: %w", err)
		}
		cfg.Holder = h
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("config after command-line overrides: %w", err)
	}
	return cfg, nil
}

// fdReserve is the file descriptors pacerd needs besides bidder connections:
// Redis, etcd and NATS connections, the admin listener's, the journal.
const fdReserve = 256

// fileLimitProblem says what is wrong when max_clients bidder connections
// could exhaust the file limit (Go raises the soft limit to the hard one at
// start): past it, new bidders would hang in the listen backlog instead of
// getting "-ERR max clients reached", and Redis could not be redialled.
func fileLimitProblem(maxClients int, nofile uint64) string {
	if uint64(maxClients)+fdReserve <= nofile {
		return ""
	}
	return fmt.Sprintf("max_clients is too close to the file limit (LimitNOFILE=): keep it %d below, or raise the limit", fdReserve)
}

// serverConfig maps the config file's bidder-socket settings onto the
// transport's, where zero means a default and "never" is negative.
func serverConfig(cfg config.Daemon, d *daemon.Daemon, log *zap.Logger) transport.ServerConfig {
	never := func(v time.Duration) time.Duration {
		if v == 0 {
			return -1
		}
		return v
	}
	ids := func(in []int64) []uint32 {
		out := make([]uint32, len(in))
		for i, v := range in {
			out[i] = uint32(v) // Validate keeps them in range
		}
		return out
	}
	sc := transport.ServerConfig{
		Server:           transport.SocketServer(cfg.SocketServer),
		Loops:            cfg.SocketLoops,
		MaxAmountMicros:  cfg.MaxAmountMicros,
		MaxClients:       cfg.MaxClients,
		IdleTimeout:      never(cfg.ClientIdleTimeout),
		ReadTimeout:      never(cfg.ClientReadTimeout),
		WriteTimeout:     never(cfg.ClientWriteTimeout),
		MaxBufferedBytes: cfg.MaxBufferedBytes,
		AllowedUIDs:      ids(cfg.AllowedUIDs),
		AllowedGIDs:      ids(cfg.AllowedGIDs),
		Logger:           log,
	}
	if d != nil {
		sc.ObserveSpend = d.ObserveSpend
	}
	return sc
}

func newLogger(cfg config.Log, stderr io.Writer) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(cfg.Level)
	if err != nil {
		return nil, fmt.Errorf("log level: %w", err)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	var encoder zapcore.Encoder
	switch cfg.Format {
	case "console":
		// Colours only on a terminal: log files and pipes get plain
		// text that grep and less read as is.
		enc.EncodeLevel = zapcore.CapitalLevelEncoder
		if isTerminal(stderr) {
			enc.EncodeLevel = zapcore.CapitalColorLevelEncoder
		}
		encoder = zapcore.NewConsoleEncoder(enc)
	case "json", "":
		encoder = zapcore.NewJSONEncoder(enc)
	default:
		return nil, fmt.Errorf("log format %q: want json or console", cfg.Format)
	}
	// Rate-limit repeated messages: with Redis down, every campaign's refill
	// loop fails the same way ten times a second. Per message and level, the
	// first 5 of each second are logged, then one in 100.
	core := zapcore.NewSamplerWithOptions(zapcore.NewCore(encoder, zapcore.AddSync(stderr), level),
		time.Second, 5, 100)
	return zap.New(core), nil
}

// isTerminal reports whether w is a character device (a terminal), where
// ANSI colours are wanted.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// loadCurves reads the curves directory; a missing directory leaves only the
// built-in flat curve, with a warning.
func loadCurves(dir string, log *zap.Logger) (map[string]*bucket.Curve, error) {
	curves, err := config.LoadCurves(os.DirFS(dir))
	if errors.Is(err, fs.ErrNotExist) {
		log.Warn("curves directory missing; only the built-in flat curve is available", zap.String("dir", dir))
		return map[string]*bucket.Curve{config.FlatCurve: bucket.Flat(24)}, nil
	}
	return curves, err
}

// run is pacerd from its command line to its exit, in phases: the
// configuration (prepare), the daemon's (daemonConfig, openDaemon), what
// serves beside it (start), readiness (becomeReady), then serving until ctx
// ends and the shutdown (serve).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, cfg, log, curves, err := prepare(args, stdout, stderr)
	if err != nil || log == nil {
		return err // nil: --help or --version, answered
	}
	defer log.Sync()
	dcfg, err := daemonConfig(cfg, o, curves, log)
	if err != nil {
		return err
	}
	d, err := openDaemon(ctx, dcfg)
	if err != nil {
		return err
	}
	s := &service{o: o, cfg: cfg, log: log, d: d}
	defer s.closeAll()
	if err := s.start(); err != nil {
		return err
	}
	s.becomeReady(len(curves))
	return s.serve(ctx)
}

// prepare reads the command line, the config file and the curves, and
// builds the logger. A nil logger with a nil error means the command line
// asked for help or the version, and it was answered.
func prepare(args []string, stdout, stderr io.Writer) (options, config.Daemon, *zap.Logger, map[string]*bucket.Curve, error) {
	var cfg config.Daemon
	o, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, cfg, nil, nil, nil
		}
		if errors.Is(err, errUsage) {
			return o, cfg, nil, nil, errors.New("bad command line (run `pacerd --help` for the flags)")
		}
		return o, cfg, nil, nil, err
	}
	if o.version {
		fmt.Fprintln(stdout, "pacerd", version)
		return o, cfg, nil, nil, nil
	}
	if cfg, err = loadConfig(o); err != nil {
		return o, cfg, nil, nil, err
	}
	if o.pprof {
		if cfg.Admin == "" {
			return o, cfg, nil, nil, errors.New("--pprof needs the admin listener (admin: unix:/run/pacer/admin.sock)")
		}
		if _, unix := config.AdminUnixPath(cfg.Admin); !unix {
			return o, cfg, nil, nil, errPprofOverTCP
		}
	}
	log, err := newLogger(cfg.Log, stderr)
	if err != nil {
		return o, cfg, nil, nil, err
	}
	curves, err := loadCurves(cfg.CurvesDir, log)
	if err != nil {
		log.Sync()
		return o, cfg, nil, nil, fmt.Errorf("curves: %w", err)
	}
	return o, cfg, log, curves, nil
}

// daemonConfig is the daemon's configuration and links (Redis, durability,
// state directory, NATS with its credentials and keys), with a warning for
// each secret given where any local user can read it.
func daemonConfig(cfg config.Daemon, o options, curves map[string]*bucket.Curve, log *zap.Logger) (daemon.Config, error) {
	if pw := o.overrides["redis"]; pw != "" && lease.Redact(pw) != pw {
		log.Warn("a Redis password is on pacerd's command line, where any local user can read it (ps); use redis_auth.password_file")
	}
	if u := o.overrides["nats"]; strings.Contains(u, "@") {
		log.Warn("NATS credentials are on pacerd's command line, where any local user can read them (ps); use nats_auth")
	}
	dcfg := cfg.Config
	ropt, err := config.RedisClientOptions(cfg.Redis, cfg.RedisAuth, cfg.RedisTLS, secrets)
	if err != nil {
		return dcfg, err
	}
	durability, assume, err := durabilityPolicy(cfg)
	if err != nil {
		return dcfg, err
	}
	dcfg.Curves, dcfg.Logger = curves, log
	dcfg.Links = daemon.Links{
		Redis: cfg.Redis, RedisOptions: ropt, Ledger: lease.Config{Durability: durability, PackedCounters: cfg.Ledger.PackedCounters},
		CheckLedger: true, AssumeDurability: assume, CheckInterval: cfg.Ledger.CheckInterval,
		StateDir: cfg.StateDir,
	}
	if cfg.NATS == "" {
		log.Warn("no NATS URL: exhaustion and pauses reach this daemon from the ledger only, within a lease window")
		return dcfg, nil
	}
	nopt, err := config.NATSClientOptions(cfg.NATSAuth, cfg.NATSTLS, secrets)
	if err != nil {
		return dcfg, err
	}
	nopt.Name, nopt.Logger = "pacerd-"+cfg.Holder, log
	if nopt.Keys, err = broadcastKeys(cfg); err != nil {
		return dcfg, err
	}
	nopt.MaxAge = cfg.Broadcast.MaxAge
	if nopt.Keys == nil {
		log.Warn("broadcast.key_file not set: NATS events are neither signed nor checked; anyone who may publish on pacer.> can make this daemon re-read the ledger (never deny or stop a campaign by itself)")
	}
	dcfg.Links.NATS, dcfg.Links.NATSOptions = cfg.NATS, nopt
	return dcfg, nil
}

// openDaemon opens the daemon; a ledger that refuses pacerd's credentials
// says which settings to check.
func openDaemon(ctx context.Context, dcfg daemon.Config) (*daemon.Daemon, error) {
	d, err := daemon.Open(ctx, dcfg)
	if err != nil && errors.Is(err, daemon.ErrRefused) && errors.Is(err, lease.ErrAuth) {
		return nil, fmt.Errorf("%w (check redis_auth, redis_tls and PACER_REDIS_PASSWORD)", err)
	}
	return d, err
}

// service is a running pacerd: the daemon and what serves beside it.
type service struct {
	o   options
	cfg config.Daemon
	log *zap.Logger
	d   *daemon.Daemon

	etcd  *clientv3.Client // nil without etcd endpoints
	ln    net.Listener
	srv   *transport.Server
	rc    *reconcile.Reconciler // nil without etcd
	admin *http.Server          // nil without an admin listener
	ready atomic.Bool

	loopCtx        context.Context
	stopLoop       context.CancelFunc
	reconcilerDone chan error
	serveDone      chan error
	daemonClosed   bool // serve closed it
}

// start connects etcd, listens on the socket, builds the socket server,
// the reconciler and the admin listener, and starts serving and the
// election.
func (s *service) start() error {
	cfg, log := s.cfg, s.log
	if len(cfg.Etcd) == 0 {
		log.Warn("no etcd endpoints: this daemon takes no part in the reconciler election; expired leases are settled lazily by later grants")
	} else {
		// The client dials lazily and retries: etcd being down only pauses
		// the reconciler; leases keep working.
		var err error
		if s.etcd, err = newEtcd(cfg, log); err != nil {
			return err
		}
	}
	var err error
	if s.ln, err = listen(cfg.Socket, os.FileMode(cfg.SocketMode), log); err != nil {
		return err
	}
	var nofile syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile); err == nil {
		if msg := fileLimitProblem(cfg.MaxClients, nofile.Cur); msg != "" {
			log.Warn(msg, zap.Int("max_clients", cfg.MaxClients), zap.Uint64("nofile", nofile.Cur))
		}
	}
	s.srv = transport.NewServer(s.d, serverConfig(cfg, s.d, log))
	bc := s.d.Broadcaster()
	if s.etcd != nil {
		var publisher reconcile.Publisher
		if bc != nil {
			publisher = bc
		}
		s.rc = reconcile.New(s.d.Ledger(), reconcile.Config{
			Holder: cfg.Holder, Grace: cfg.Grace, Publisher: publisher, Logger: log, OnLeadership: s.d.SetLeader,
			Gate: s.d.LedgerCheck(), Watermarks: reconcile.NewEtcdWatermarks(s.etcd), LeaseWindow: cfg.LeaseWindow,
		})
	}
	if cfg.Admin != "" {
		s.admin, err = admin(adminOptions{addr: cfg.Admin, maxConns: cfg.AdminMaxConns, idleTimeout: cfg.AdminIdleTimeout, pprof: s.o.pprof},
			s.d, s.srv, s.rc, &s.ready, bc, log)
		if err != nil {
			s.ln.Close()
			return err
		}
	}
	s.loopCtx, s.stopLoop = context.WithCancel(context.Background())
	s.reconcilerDone = make(chan error, 1)
	if s.rc != nil {
		go func() {
			s.reconcilerDone <- s.rc.Run(s.loopCtx, reconcile.NewEtcdElector(s.etcd, cfg.Holder, int(cfg.Election.TTL/time.Second)))
		}()
	} else {
		s.reconcilerDone <- nil
	}
	s.serveDone = make(chan error, 1)
	go func() { s.serveDone <- s.srv.Serve(s.ln) }()
	return nil
}

// becomeReady primes the campaigns of the last run, then tells systemd
// (READY=1) and the admin listener's /readyz. Ready once the socket listens
// and those campaigns have leases again, bounded: a slow ledger must not
// keep systemd waiting.
func (s *service) becomeReady(curves int) {
	warm := loadCampaigns(s.cfg.StateDir)
	warmed := make(chan struct{})
	go func() { s.d.Warm(warm); close(warmed) }()
	select {
	case <-warmed:
	case <-time.After(5 * time.Second):
		s.log.Warn("campaigns of the last run not all primed within 5s; serving anyway", zap.Int("campaigns", len(warm)))
	}
	s.ready.Store(true)
	notify(s.log, "READY=1")
	notify(s.log, "STATUS="+status(s.d))
	go watchdog(s.loopCtx, s.d, s.log)
	s.log.Info("pacerd serving", zap.String("version", version), zap.String("socket", s.cfg.Socket),
		zap.Strings("redis", lease.RedactAll(s.cfg.Redis)), zap.String("holder", s.cfg.Holder), zap.Int("curves", curves))
}

// serve waits for ctx to end (SIGTERM) or the socket server to stop, then
// shuts down: no new calls, those in flight answered, the reconciler
// resigned, this run's campaigns remembered, the leases released.
func (s *service) serve(ctx context.Context) error {
	log := s.log
	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down: no new calls, answering those in flight, releasing leases")
	case serveErr = <-s.serveDone:
		log.Error("socket server stopped", zap.Error(serveErr))
	}
	s.ready.Store(false)
	notify(log, "STOPPING=1")
	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(shutCtx); err != nil {
		log.Warn("socket server shutdown", zap.Error(err))
	}
	s.stopLoop()
	if err := <-s.reconcilerDone; err != nil {
		log.Warn("reconciler resign", zap.Error(err))
	}
	if err := saveCampaigns(s.cfg.StateDir, s.d.Campaigns()); err != nil {
		log.Warn("cannot remember this run's campaigns", zap.String("dir", s.cfg.StateDir), zap.Error(err))
	}
	s.daemonClosed = true
	if err := s.d.Close(shutCtx); err != nil {
		log.Warn("some leases were not released; the ledger settles them after expiry", zap.Error(err))
	}
	log.Info("pacerd stopped")
	if serveErr != nil && !errors.Is(serveErr, transport.ErrServerClosed) && !errors.Is(serveErr, net.ErrClosed) {
		return serveErr
	}
	return nil
}

// closeAll closes, on the way out, what start opened, and the daemon if
// serve did not (an early return).
func (s *service) closeAll() {
	if s.stopLoop != nil {
		s.stopLoop()
	}
	if s.admin != nil {
		s.admin.Close()
	}
	if s.etcd != nil {
		s.etcd.Close()
	}
	if !s.daemonClosed {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.d.Close(cctx)
	}
}
