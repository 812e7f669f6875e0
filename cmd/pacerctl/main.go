// Command pacerctl is the pacer operator's tool: it creates, changes, pauses
// and inspects campaigns in the Redis ledger, shows pacing curves, checks
// that the ledger balances, and sends SPEND/REFUND/BALANCE to a local
// pacerd. Run "pacerctl help" for the commands.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/pacer/pacer/config"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
)

// version is set at build time (make build: -X main.version=...).
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, env{stdout: os.Stdout, stderr: os.Stderr, now: time.Now, getenv: os.Getenv}, os.Args[1:])
	stop()
	os.Exit(code)
}

// env is what pacerctl takes from the outside world besides its arguments,
// so tests can run it in-process with a fixed clock.
type env struct {
	stdout, stderr io.Writer
	now            func() time.Time
	// getenv reads the PACER_* defaults of the global flags (nil: none).
	getenv func(string) string
}

// envDefaults: the environment variables that give global flags their
// defaults, so that `. .run/env` (written by make run) points every
// pacerctl at the dev fleet. A flag given on the command line wins.
var envDefaults = []struct{ flag, env string }{
	{"redis", "PACER_REDIS"},
	{"socket", "PACER_SOCKET"},
	{"curves", "PACER_CURVES"},
	{"nats", "PACER_NATS"},
	{"etcd", "PACER_ETCD"},
}

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1 // the command failed, or check found problems
	exitUsage   = 2 // the command line is wrong
)

// usageError is a mistake on the command line: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// errReported means the command already printed why it failed (check's
// problems); run only sets the exit status.
var errReported = errors.New("reported")

// errHelp means help was asked for and printed: exit status 0.
var errHelp = errors.New("help")

const (
	defaultRedis   = "127.0.0.1:6379"
	defaultSocket  = "/run/pacer/pacer.sock"
	defaultCurves  = "/etc/pacer/curves"
	defaultTimeout = 30 * time.Second
)

// app is one pacerctl invocation: its environment, global flags and the
// ledger client, opened on first use.
type app struct {
	env
	redisAddrs string
	socket     string
	curvesDir  string
	json       bool
	natsURL    string // --nats: broadcast campaign changes; "" = the ledger only
	etcdURLs   string // --etcd: for status's reconciler leader and check's watermark

	durability, durabilityAssume string // --durability, --durability-assume: for check

	redisAuth config.RedisAuth // --redis-user, --redis-password-file, --redis-sentinel-*
	redisTLS  config.TLS       // --redis-tls, --redis-ca, --redis-cert, --redis-key, --redis-server-name
	etcdAuth  config.EtcdAuth  // --etcd-user, --etcd-password-file
	etcdTLS   config.TLS       // --etcd-ca, --etcd-cert, --etcd-key
	natsAuth  config.NATSAuth  // --nats-creds, --nats-nkey, --nats-user, --nats-password-file
	natsTLS   config.TLS       // --nats-ca, --nats-cert, --nats-key
	keyFile   string           // --broadcast-key-file: signs broadcasts

	timeout     time.Duration // --timeout
	showVersion bool          // --version

	rdb    redis.UniversalClient
	ledger *lease.Ledger
}

type command struct {
	name string // "campaign set"
	args string // synopsis of the arguments
	help string
	run  func(a *app, ctx context.Context, args []string) error
	// rounds: the command may run until interrupted (top --watch), and
	// applies --timeout to each of its rounds instead of to itself.
	rounds bool
}

// commands is the full command list, in the order usage shows it.
func commands() []command {
	return slices.Concat(campaignCommands(), fleetCommands(), curveCommands(), ledgerCommands(), localCommands())
}

// campaignCommands: the campaign group: create, read, list, pause and resume.
func campaignCommands() []command {
	return []command{
		{name: "campaign set", args: "<id> [--daily MONEY] [--tz Area/City] [--curve NAME] [--shards N] [--carry-over]",
			help: "Create or update a campaign. Fields not given keep their value; a new campaign needs\n" +
				"--daily and defaults to tz UTC, curve flat, 8 shards, active. If today (in the campaign's\n" +
				"time zone) is already open, a changed --daily is applied to today's budget too; a cut\n" +
				"takes only budget not yet leased or spent. --tz and --shards apply from the next day opened.",
			run: (*app).campaignSet},
		{name: "campaign get", args: "<id>",
			help: "Print the campaign and today's balances (local day of its time zone) as JSON.",
			run:  (*app).campaignGet},
		{name: "campaign list", args: "",
			help: "List campaigns with today's spent share (a table, or JSON with --json).",
			run:  (*app).campaignList},
		{name: "campaign pause", args: "<id>",
			help: "Pause a campaign: daemons stop spending it at their next campaign refresh.",
			run: func(a *app, ctx context.Context, args []string) error {
				return a.campaignState(ctx, "pause", lease.StatePaused, args)
			}},
		{name: "campaign resume", args: "<id>",
			help: "Resume a paused campaign.",
			run: func(a *app, ctx context.Context, args []string) error {
				return a.campaignState(ctx, "resume", lease.StateActive, args)
			}},
	}
}

// fleetCommands: what the fleet did and does: a day's account, the fleet's state, the busiest campaigns.
func fleetCommands() []command {
	return []command{
		{name: "report", args: "<id> [--day YYYY-MM-DD]",
			help: "Print a campaign-day's account: budget, spent, returned, lost (settled crash leases),\n" +
				"outstanding, under-delivery, leases. --day defaults to yesterday in the campaign's time\n" +
				"zone. The report the reconciler saved when it closed the day is printed as is; a day\n" +
				"without one (still open, or not yet closed) is rebuilt from the audit streams and marked\n" +
				"provisional: its figures can still change.",
			run: (*app).report},
		{name: "status", args: "",
			help: "The fleet as the ledger (and etcd, with --etcd) sees it: the reconciler leader and its\n" +
				"standbys, the daemons holding leases (count and micros, and how many have expired), and\n" +
				"per campaign today's budget, spent, spent share vs. the curve's target now, and state\n" +
				"(active, paused, or exhausted when nothing is left to grant).",
			run: (*app).status},
	}
}

// curveCommands: the pacing curves.
func curveCommands() []command {
	return []command{
		{name: "curve list", args: "",
			help: "List the pacing curves in --curves plus the built-in flat and auto: slots and peak slot\n" +
				"(auto has none: it is fitted per campaign-day; see curve show auto).",
			run: (*app).curveList},
		{name: "curve show", args: "<name> [--png FILE] [--size WxH]",
			help: "Draw a curve's weights as a sparkline and print its cumulative share every 3 hours.\n" +
				"--png also draws it to a PNG image (default 1000x500 pixels): the share of the day per\n" +
				"slot as steps, and the cumulative share as a line.",
			run: (*app).curveShow},
		{name: "curve fit", args: "<campaign>|--from-csv FILE [--days N] [--slots N] [--name NAME] [--out FILE]",
			help: "Fit a pacing curve to observed demand and write it as a curve file (to --out, or stdout).\n" +
				"From a campaign: the SPEND requests per 15-minute slot that daemons flush to Redis\n" +
				"(pacer:demand:<campaign>:<day>), summed over the last --days complete local days\n" +
				"(default 7; days without data are skipped). From --from-csv: a CSV file, a header line\n" +
				"then one row per slot, \"slot,requests\" (24, 48, 96 or 1440 rows, slot 0 first at local\n" +
				"midnight) or \"hour,requests\" (24 rows, hours 0-23); # starts a comment. The demand is\n" +
				"smoothed (a triangular moving average within the day, --smooth slots each side; default one slot\n" +
				"of 24 or 48, two of 96, thirty of 1440), normalised, and bounded: every slot gets between --min and --max times the\n" +
				"mean share (default 0.2 and 5), so no slot is starved and none takes an extreme share.\n" +
				"--slots is the fitted curve's slot count (24, 48, 96 or 1440; default 24). The curve is\n" +
				"named --name (default: the campaign or file name with -fit); save it as NAME.yaml in the\n" +
				"curves directory of every host.",
			run: (*app).curveFit},
	}
}

// ledgerCommands: the ledger's checks.
func ledgerCommands() []command {
	return []command{
		{name: "check", args: "[<id>]",
			help: "Verify that Redis meets the durability policy (--durability; as pacerd checks at start:\n" +
				"CONFIG GET appendonly/appendfsync, INFO persistence/replication on every master), and that\n" +
				"every open day of one campaign, or of all, balances:\n" +
				"budget = locked + available + leased + spent on every shard, and the day's budget =\n" +
				"its shards' budgets - owed + moves in flight. Each move of budget between two shards begun\n" +
				"and not finished is named (\"pending\"; ok adds moving=MICROS): the reconciler finishes it.\n" +
				"A move begun longer ago than --stale-after (default 10m: two reconciler sweep periods) fails,\n" +
				"as does a budget change begun and not finished. With --etcd, each Redis master's write\n" +
				"watermark is compared with the one the reconciler records in etcd: a master behind it lost\n" +
				"acknowledged writes (a restored backup, a lagging replica promoted) and fails, naming the\n" +
				"days whose shards it holds; without --etcd check says it could not compare. With --sql DSN\n" +
				"(default $PACER_SQL), every shard's daemon-run totals are compared with PostgreSQL's copy\n" +
				"(pacer-export): a shard that records less than PostgreSQL saw lost acknowledged writes and\n" +
				"fails, naming the run (pacerctl recover --from-sql raises it).\n" +
				"Exit status 1 if anything is off.",
			run: (*app).check},
		{name: "top", args: "[--limit N] [--watch DURATION]",
			help: "The campaigns with the most SPENDs a second across the fleet, busiest first, from the\n" +
				"SPEND counts daemons add to the ledger (pacer:demand:<campaign>:<day>) once a minute: each\n" +
				"campaign's rate is over the quarter-hour slot of its local day before the current one and\n" +
				"the current one so far (15 to 30 minutes). SHARE is its part of the fleet's SPENDs a second,\n" +
				"ASKED/S the micros a second its SPENDs asked for (allowed or not). --limit (default 20; 0:\n" +
				"all) bounds the list; --watch DURATION prints it again every DURATION until interrupted\n" +
				"(with --json, one JSON object a line).",
			run: (*app).top, rounds: true},
		reconcileCommand(),
		recoverCommand(),
	}
}

// localCommands: the local pacerd's socket, and pacerctl itself.
func localCommands() []command {
	return []command{
		{name: "spend", args: "<campaign> <MONEY> [auction-id]",
			help: "Ask the local pacerd (--socket) to SPEND; prints the decision and its wire integer.",
			run:  (*app).spend},
		{name: "refund", args: "<campaign> <MONEY> [auction-id]",
			help: "REFUND an amount to the local pacerd (--socket).",
			run:  (*app).refund},
		{name: "balance", args: "<campaign>",
			help: "Print the local pacerd's view of a campaign (--socket).",
			run:  (*app).balance},
		{name: "help", args: "",
			help: "Print this help."},
		{name: "version", args: "",
			help: "Print pacerctl's version."},
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `pacerctl: the pacer operator's tool

Usage: pacerctl [global flags] <command> [arguments]

Global flags (anywhere on the line, before a "--"):
  --redis ADDR[,ADDR...]  the Redis ledger: host:port, a Unix socket path (starting with / or .),
                          sentinel://master-name@host:port[,host:port...], or several
                          host:port Cluster seeds (default `+defaultRedis+`)
  --socket PATH           pacerd's socket, for spend/refund/balance (default `+defaultSocket+`)
  --curves DIR            pacing-curve directory (default `+defaultCurves+`; pass
                          --curves configs/curves to use a source checkout's examples)
  --nats URL[,URL...]     NATS server(s): campaign set/pause/resume broadcast what they
                          changed (pacer.changed.<id>, or pacer.revoked.<id> for a pause or a
                          budget cut), so daemons re-read the campaign within one NATS hop and
                          a settings read; without it they learn of it from the ledger within a lease
                          window
  --redis-user NAME       Redis ACL user (default: the default user)
  --redis-password-file F file holding the Redis password; without it, the password comes from
                          a redis:// URL's user info, else $PACER_REDIS_PASSWORD, else
                          $REDISCLI_AUTH (never put a password on the command line: ps shows it)
  --redis-sentinel-user NAME, --redis-sentinel-password-file F
                          the Sentinels' own credentials, for a sentinel:// address
  --redis-tls             TLS to Redis (rediss:// URLs turn it on too)
  --redis-ca FILE         PEM CA bundle that signs Redis's certificate (default: system roots)
  --redis-cert FILE, --redis-key FILE
                          client certificate and key, for tls-auth-clients yes
  --redis-server-name N   the name Redis's certificate must carry (default: the address's host)
  --nats-creds FILE       NATS credentials file (user JWT and seed); or --nats-nkey FILE (a user
                          nkey seed); or --nats-user NAME with --nats-password-file FILE. The
                          operator's NATS user may publish pacer.revoked.> and pacer.changed.>
  --nats-ca FILE, --nats-cert FILE, --nats-key FILE
                          TLS to NATS: the private CA, and a client certificate and key
  --broadcast-key-file F  the fleet's broadcast key file (pacerd's broadcast.key_file): signs
                          what --nats publishes; daemons with a key ignore unsigned events
  --etcd URL[,URL...]     etcd endpoints, for status's reconciler leader and check's watermark
                          (http://host:2379, or https:// with --etcd-ca, --etcd-cert, --etcd-key
                          for TLS and client certificates; --etcd-user and --etcd-password-file
                          for etcd's auth)
  --durability POLICY     the ledger's durability policy, for check: fsync, replicas:N or none,
                          as pacerd's ledger.durability (default fsync)
  --durability-assume P   as pacerd's ledger.durability_assume: the policy a Redis that
                          refuses CONFIG is known to meet (default: none, so it fails)
  --json                  machine-readable output (campaign set/list/pause/resume, report,
                          status, top, curve list/show, check, spend/refund/balance; campaign get
                          is always JSON)
  --timeout DURATION      give up after this long (default `+defaultTimeout.String()+`)
  --version               print pacerctl's version (also: pacerctl version)

PACER_REDIS, PACER_SOCKET, PACER_CURVES, PACER_NATS and PACER_ETCD, when set, are the
defaults of --redis, --socket, --curves, --nats and --etcd: after `+"`make run`"+`, run
`+"`. .run/env`"+` and every pacerctl command talks to the dev fleet.

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %s\n", strings.TrimSpace(c.name+" "+c.args))
		for _, line := range strings.Split(c.help, "\n") {
			fmt.Fprintf(w, "      %s\n", line)
		}
	}
	fmt.Fprint(w, `
MONEY is an integer of micros (1500000, or 1500000micros), or currency units with the
suffix units, exact to 6 decimals: 1.5units = 1500000 micros, 0.000001units = 1 micro.
Never negative. (The former suffix u is refused: it reads as µ.)

Run "pacerctl <command> -h" for a command's flags.
Exit status: 0 success, 1 failure (or check found a problem), 2 usage error.
`)
}

// run runs pacerctl with args (without the program name) and returns the
// exit status.
func run(ctx context.Context, e env, args []string) int {
	a := &app{env: e}
	// No password of an address flag reaches the terminal (redact.go).
	a.stdout, a.stderr = redactingWriter{e.stdout, a}, redactingWriter{e.stderr, a}
	defer a.close()
	err := a.main(ctx, args)
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, errHelp):
		return exitOK
	case errors.Is(err, errReported):
		return exitFailure
	case errors.As(err, &ue):
		fmt.Fprintf(a.stderr, "pacerctl: %s\nRun 'pacerctl help' for usage.\n", ue.msg)
		return exitUsage
	default:
		fmt.Fprintf(a.stderr, "pacerctl: %v\n", err)
		return exitFailure
	}
}

// globalFlags returns the flag set of the global flags, bound to a's fields.
func (a *app) globalFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("pacerctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&a.redisAddrs, "redis", defaultRedis, "")
	fs.StringVar(&a.socket, "socket", defaultSocket, "")
	fs.StringVar(&a.curvesDir, "curves", defaultCurves, "")
	fs.BoolVar(&a.json, "json", false, "")
	fs.StringVar(&a.natsURL, "nats", "", "")
	fs.StringVar(&a.etcdURLs, "etcd", "", "")
	fs.StringVar(&a.durability, "durability", "fsync", "")
	fs.StringVar(&a.durabilityAssume, "durability-assume", "", "")
	fs.StringVar(&a.redisAuth.Username, "redis-user", "", "")
	fs.StringVar(&a.redisAuth.PasswordFile, "redis-password-file", "", "")
	fs.StringVar(&a.redisAuth.SentinelUsername, "redis-sentinel-user", "", "")
	fs.StringVar(&a.redisAuth.SentinelPasswordFile, "redis-sentinel-password-file", "", "")
	fs.StringVar(&a.natsAuth.CredsFile, "nats-creds", "", "")
	fs.StringVar(&a.natsAuth.NkeyFile, "nats-nkey", "", "")
	fs.StringVar(&a.natsAuth.Username, "nats-user", "", "")
	fs.StringVar(&a.natsAuth.PasswordFile, "nats-password-file", "", "")
	fs.StringVar(&a.keyFile, "broadcast-key-file", "", "")
	fs.StringVar(&a.natsTLS.CAFile, "nats-ca", "", "")
	fs.StringVar(&a.natsTLS.CertFile, "nats-cert", "", "")
	fs.StringVar(&a.natsTLS.KeyFile, "nats-key", "", "")
	fs.StringVar(&a.etcdAuth.Username, "etcd-user", "", "")
	fs.StringVar(&a.etcdAuth.PasswordFile, "etcd-password-file", "", "")
	fs.StringVar(&a.etcdTLS.CAFile, "etcd-ca", "", "")
	fs.StringVar(&a.etcdTLS.CertFile, "etcd-cert", "", "")
	fs.StringVar(&a.etcdTLS.KeyFile, "etcd-key", "", "")
	fs.BoolVar(&a.redisTLS.Enabled, "redis-tls", false, "")
	fs.StringVar(&a.redisTLS.CAFile, "redis-ca", "", "")
	fs.StringVar(&a.redisTLS.CertFile, "redis-cert", "", "")
	fs.StringVar(&a.redisTLS.KeyFile, "redis-key", "", "")
	fs.StringVar(&a.redisTLS.ServerName, "redis-server-name", "", "")
	fs.DurationVar(&a.timeout, "timeout", defaultTimeout, "")
	fs.BoolVar(&a.showVersion, "version", false, "")
	return fs
}

// splitGlobals takes the global flags (and their values) out of args,
// wherever they stand, so that "pacerctl campaign list --json" means what
// "pacerctl --json campaign list" does. The rest, in order, is the command
// and its own arguments. After "--" nothing is taken. Before the command
// word, any flag is taken, so that an unknown one is reported as a global
// flag (and -h prints the usage); after it, only the global ones are.
func splitGlobals(fs *flag.FlagSet, args []string) (globals, rest []string) {
	command := false
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			if !command {
				i++ // "pacerctl -- spend c1 5": the "--" ends the global flags only
			}
			return globals, append(rest, args[i:]...)
		}
		if !isFlag(arg) {
			command = true
			rest = append(rest, arg)
			continue
		}
		name, hasValue := flagName(arg)
		f := fs.Lookup(name)
		if f == nil && command {
			rest = append(rest, arg)
			continue
		}
		globals = append(globals, arg)
		if f != nil && !hasValue && !isBoolFlag(f) && i+1 < len(args) {
			i++
			globals = append(globals, args[i])
		}
	}
	return globals, rest
}

// isFlag says whether arg is a flag rather than an argument: it starts with
// a dash and is not a lone dash or a negative number ("-5", "-1.5units"),
// which are arguments, so that a command can refuse them with a reason.
func isFlag(arg string) bool {
	if len(arg) < 2 || arg[0] != '-' {
		return false
	}
	return !(arg[1] >= '0' && arg[1] <= '9' || arg[1] == '.')
}

// flagName returns the name of a flag argument ("--daily=5" -> "daily")
// and whether it carries its value.
func flagName(arg string) (string, bool) {
	name := strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-")
	name, _, hasValue := strings.Cut(name, "=")
	return name, hasValue
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func (a *app) main(ctx context.Context, args []string) error {
	fs := a.globalFlags()
	if a.getenv != nil {
		for _, d := range envDefaults {
			if v := a.getenv(d.env); v != "" {
				if err := fs.Set(d.flag, v); err != nil {
					return usagef("%s=%q: %v", d.env, v, err)
				}
			}
		}
	}
	globals, rest := splitGlobals(fs, args)
	if err := fs.Parse(globals); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(a.stdout)
			return errHelp
		}
		return usagef("%v", err)
	}
	if a.timeout <= 0 {
		return usagef("--timeout %v: must be positive", a.timeout)
	}
	if a.showVersion || (len(rest) > 0 && rest[0] == "version") {
		fmt.Fprintln(a.stdout, "pacerctl", version)
		return nil
	}
	if len(rest) == 0 {
		fmt.Fprint(a.stderr, "Usage: pacerctl [global flags] <command> [arguments]\n"+
			"Commands: campaign set|get|list|pause|resume, report, status, top, curve list|show|fit, check,\n"+
			"          spend, refund, balance, help, version\n")
		return usagef("no command given")
	}
	if rest[0] == "help" {
		usage(a.stdout)
		return nil
	}
	cmd, args, err := findCommand(rest)
	if err != nil {
		return err
	}
	if !cmd.rounds {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.timeout)
		defer cancel()
	}
	if err := cmd.run(a, ctx, args); err != nil {
		var ue *usageError
		if errors.As(err, &ue) || errors.Is(err, errHelp) || errors.Is(err, errReported) {
			return err
		}
		return fmt.Errorf("%s: %w%s", cmd.name, err, a.nextStep(cmd.name, err))
	}
	return nil
}

// nextStep turns "connection refused" and "no such file" into what to run:
// the usual cause is a flag left at its production default while the
// fleet is the dev one (or not started).
func (a *app) nextStep(cmd string, err error) string {
	if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ENOENT) {
		return ""
	}
	switch cmd {
	case "spend", "refund", "balance":
		return fmt.Sprintf("\n  no pacerd answers on --socket %s. Is it running? For the dev fleet: `make run`, then "+
			"`. .run/env` (sets PACER_SOCKET) or pass --socket .run/pacer-1.sock", a.socket)
	}
	return fmt.Sprintf("\n  no Redis ledger answers on --redis %s. Is it running? For the dev fleet: `make run`, then "+
		"`. .run/env` (sets PACER_REDIS) or pass --redis .run/redis.sock", a.redisAddrs)
}

// findCommand matches the one- or two-word command at the start of args.
func findCommand(args []string) (command, []string, error) {
	var groups []string
	for _, c := range commands() {
		words := strings.Fields(c.name)
		if len(args) >= len(words) && strings.Join(args[:len(words)], " ") == c.name {
			return c, args[len(words):], nil
		}
		if len(words) == 2 && words[0] == args[0] {
			groups = append(groups, words[1])
		}
	}
	if len(groups) > 0 {
		if len(args) == 1 {
			return command{}, nil, usagef("%s: want a subcommand: %s", args[0], strings.Join(groups, ", "))
		}
		return command{}, nil, usagef("%s: unknown subcommand %q (want %s)", args[0], args[1], strings.Join(groups, ", "))
	}
	return command{}, nil, usagef("unknown command %q", args[0])
}

// newFlagSet returns a flag set for a command that reports errors instead of
// printing them, and prints the command's help for -h.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parseArgs parses a command's flags, which may come before, between or
// after its positional arguments ("campaign set c1 --daily 5units"), and
// returns the positional ones. A negative number is an argument, not a flag
// (so "spend c1 -5" is refused as a negative amount). After "--" everything
// is positional.
func (a *app) parseArgs(fs *flag.FlagSet, args []string, synopsis string) ([]string, error) {
	var pos []string
	for len(args) > 0 {
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		if !isFlag(args[0]) {
			pos = append(pos, args[0])
			args = args[1:]
			continue
		}
		n := 1 // the flag, and its value when it takes the next argument
		if name, hasValue := flagName(args[0]); !hasValue && len(args) > 1 {
			if f := fs.Lookup(name); f != nil && !isBoolFlag(f) {
				n = 2
			}
		}
		if err := fs.Parse(args[:n]); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				a.commandHelp(fs, synopsis)
				return nil, errHelp
			}
			return nil, usagef("%s: %v", fs.Name(), err)
		}
		args = args[n:]
	}
	return pos, nil
}

// commandHelp prints a command's synopsis, help and flags (for -h, --help).
func (a *app) commandHelp(fs *flag.FlagSet, synopsis string) {
	fmt.Fprintf(a.stdout, "Usage: pacerctl %s\n", strings.TrimSpace(fs.Name()+" "+synopsis))
	for _, c := range commands() {
		if c.name == fs.Name() {
			fmt.Fprintf(a.stdout, "\n%s\n", c.help)
		}
	}
	fs.SetOutput(a.stdout)
	fs.PrintDefaults()
	fmt.Fprintln(a.stdout, "\nThe global flags (pacerctl help) may be given anywhere on the line.")
}

// noArgs parses the flags of a command that takes no arguments (its -h
// among them) and refuses any argument.
func (a *app) noArgs(cmd string, args []string) error {
	pos, err := a.parseArgs(newFlagSet(cmd), args, "")
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("%s: takes no arguments, got %q", cmd, pos)
	}
	return nil
}

// campaignArg checks that a command got exactly the one campaign id it needs.
func campaignArg(cmd string, pos []string) (string, error) {
	if len(pos) != 1 {
		return "", usagef("%s: want exactly one campaign id, got %d arguments", cmd, len(pos))
	}
	if !lease.ValidCampaignID(pos[0]) {
		return "", usagef("%s: bad campaign id %q: want 1 to 128 characters from [A-Za-z0-9_.-]", cmd, pos[0])
	}
	return pos[0], nil
}

// redisClient builds a client for --redis (see lease.ParseTarget) with the
// credentials and TLS of the --redis-* flags and the environment, as
// pacerd's config would give them.
func (a *app) redisClient() (redis.UniversalClient, error) {
	var list []string
	for _, s := range strings.Split(a.redisAddrs, ",") {
		if s = strings.TrimSpace(s); s != "" {
			list = append(list, s)
		}
	}
	if err := config.CheckRedis(list); err != nil {
		return nil, usagef("--redis: %v", err)
	}
	if t := a.redisTLS; !t.Enabled && (t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != "") {
		a.redisTLS.Enabled = true // a CA or a certificate means TLS
	}
	if (a.redisTLS.CertFile == "") != (a.redisTLS.KeyFile == "") {
		return nil, usagef("--redis-cert and --redis-key go together")
	}
	opt, err := config.RedisClientOptions(list, a.redisAuth, a.redisTLS, config.Secrets{ReadFile: os.ReadFile, Getenv: a.getenv})
	if err != nil {
		return nil, err
	}
	opt.DialTimeout = 5 * time.Second
	return lease.NewClientWith(list, opt)
}

// getLedger opens the ledger on first use; commands that do not need Redis
// never dial it.
func (a *app) getLedger() (*lease.Ledger, error) {
	if a.ledger != nil {
		return a.ledger, nil
	}
	rdb, err := a.redisClient()
	if err != nil {
		return nil, err
	}
	a.rdb = rdb
	a.ledger = lease.New(rdb, lease.Config{}, nil)
	return a.ledger, nil
}

// campaigns opens the ledger and lists every campaign in it.
func (a *app) campaigns(ctx context.Context) (*lease.Ledger, []lease.Campaign, error) {
	l, err := a.getLedger()
	if err != nil {
		return nil, nil, err
	}
	cs, err := l.ListCampaigns(ctx)
	return l, cs, err
}

func (a *app) close() {
	if a.rdb != nil {
		a.rdb.Close()
	}
}

func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (a *app) table() *tabwriter.Writer {
	return tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
}

func (a *app) warnf(format string, args ...any) {
	fmt.Fprintf(a.stderr, "pacerctl: warning: "+format+"\n", args...)
}
