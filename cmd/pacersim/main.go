// Command pacersim runs a simulated day of a pacer fleet against a real
// redis-server and writes pacing-quality results and plots:
//
//	pacersim SCENARIO.yaml [--out DIR] [--json] [--seed N] [--redis ADDR]
//
// See docs/SIMULATION.md.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/pacer/pacer/sim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pacersim:", err)
		os.Exit(1)
	}
}

// flags are pacersim's command line.
type flags struct {
	fs                                *flag.FlagSet
	out, redisAddr, redisServer       *string
	imgPrefix, cpuProfile, memProfile *string
	curvesDir, writeScenario, curve   *string
	trace                             *string
	asJSON, quiet                     *bool
	seed                              *uint64
	family                            *int
	warmup                            *time.Duration
	sparseWait                        optionalDuration
	positional                        []string // the scenario file, if named
}

// parseFlags parses args, flags before or after the scenario path.
func parseFlags(args []string, stderr io.Writer) (*flags, error) {
	fs := flag.NewFlagSet("pacersim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := &flags{fs: fs}
	f.out = fs.String("out", "sim-out", "directory for results.json, results.md and the plots")
	f.asJSON = fs.Bool("json", false, "print the results as JSON on stdout (default: the Markdown table)")
	f.seed = fs.Uint64("seed", 0, "random seed (default: the scenario's)")
	f.redisAddr = fs.String("redis", "", "use this Redis (host:port or socket path; it must hold no pacer keys) instead of starting a redis-server")
	f.redisServer = fs.String("redis-server", "redis-server", "redis-server binary to start")
	f.imgPrefix = fs.String("img-prefix", "", "path the Markdown links the plots from (default: next to results.md)")
	f.quiet = fs.Bool("quiet", false, "no progress line")
	f.cpuProfile = fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	f.memProfile = fs.String("memprofile", "", "write an allocation profile of the run to this file")
	f.family = fs.Int("family", 0, "instead of a scenario file, run a family of N campaigns generated from --seed (default 1): budgets of 20 to 1,000,000 bids, demand 1x-3x, irregular traffic")
	f.curvesDir = fs.String("curves", "configs/curves", "curves directory a --family scenario names")
	f.writeScenario = fs.String("write-scenario", "", "with --family: also write the generated scenario to this file")
	f.warmup = fs.Duration("warmup", -1, "run the fleet this long (at most 24h) before the measured day, pacer only, nothing counted: a fleet that has run for days (default: the scenario's warmup)")
	f.curve = fs.String("curve", "", "pace every campaign by this curve instead of the scenario's (the traffic unchanged): one of its curves, or auto, fitted each day to the demand the fleet recorded the days before (with --warmup 24h, the day before's)")
	fs.Var(&f.sparseWait, "sparse-wait", "the daemons' lease.sparse_wait, a `duration`; 0s: off, sparse campaigns hold standing leases (default: the scenario's daemon.sparse_wait, else the daemon's)")
	f.trace = fs.String("trace", "", "write a line per SPEND (time, host, amount, answer, what the host held), and a minute a line per shard, of these campaigns (comma-separated; 'all' for every one) to trace.log in --out")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: pacersim SCENARIO.yaml [--out DIR] [--json] [--seed N] [--redis ADDR]")
		fmt.Fprintln(stderr, "       pacersim --family N [--seed S] [--write-scenario FILE] [--out DIR] ...")
		fs.PrintDefaults()
	}
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return f, nil
		}
		f.positional = append(f.positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	sc, err := scenario(*f.family, *f.seed, *f.curvesDir, *f.writeScenario, f.positional)
	if err != nil {
		if errors.Is(err, errUsage) {
			f.fs.Usage()
		}
		return err
	}
	opt, done, err := f.options(stderr)
	defer done()
	if err != nil {
		return err
	}
	res, err := sim.Run(ctx, sc, opt)
	if err != nil {
		return err
	}
	if err := report(res, *f.out, *f.imgPrefix, *f.asJSON, stdout); err != nil {
		return err
	}
	return violated(res, stderr)
}

// options are the run's sim.Options from the flags; done closes the trace
// file and ends the profiles, and is to be called whatever err is.
func (f *flags) options(stderr io.Writer) (opt sim.Options, done func(), err error) {
	var closers []func()
	done = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	opt = sim.Options{RedisAddr: *f.redisAddr, RedisServer: *f.redisServer, Seed: *f.seed, Curve: *f.curve}
	if *f.warmup >= 0 {
		opt.Warmup = f.warmup
	}
	if f.sparseWait.set {
		opt.SparseWait = &f.sparseWait.d
	}
	if !*f.quiet {
		opt.Progress = stderr
	}
	if *f.trace != "" {
		w, closeTrace, err := traceFile(*f.out)
		if err != nil {
			return opt, done, err
		}
		closers = append(closers, closeTrace)
		opt.Trace = w
		if *f.trace != "all" {
			opt.TraceCampaigns = strings.Split(*f.trace, ",")
		}
	}
	if *f.cpuProfile != "" {
		stop, err := profile(*f.cpuProfile)
		if err != nil {
			return opt, done, err
		}
		closers = append(closers, stop)
	}
	if *f.memProfile != "" {
		closers = append(closers, func() { writeAllocs(*f.memProfile, stderr) })
	}
	return opt, done, nil
}

// writeAllocs writes the allocation profile of the run so far to path.
func writeAllocs(path string, stderr io.Writer) {
	fh, err := os.Create(path)
	if err == nil {
		err = pprof.Lookup("allocs").WriteTo(fh, 0)
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "pacersim: memprofile:", err)
	}
}

// profile starts a CPU profile into path; stop ends it.
func profile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// traceFile creates trace.log in out; done flushes and closes it.
func traceFile(out string) (w *bufio.Writer, done func(), err error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, nil, err
	}
	f, err := os.Create(filepath.Join(out, "trace.log"))
	if err != nil {
		return nil, nil, err
	}
	w = bufio.NewWriter(f)
	return w, func() { w.Flush(); f.Close() }, nil
}

// errUsage is a command line that names no scenario, or two.
var errUsage = errors.New("want exactly one scenario file, or --family N")

// scenario is the run's scenario: the file named, or a family of n
// campaigns generated from seed (and written to writeTo, if set).
func scenario(n int, seed uint64, curvesDir, writeTo string, positional []string) (*sim.Scenario, error) {
	switch {
	case n > 0 && len(positional) == 0:
		if n > 1000 {
			return nil, fmt.Errorf("--family %d: at most 1,000 campaigns", n)
		}
		data := sim.Family(max(seed, 1), n, curvesDir)
		if writeTo != "" {
			if err := os.WriteFile(writeTo, data, 0o644); err != nil {
				return nil, err
			}
		}
		sc, err := sim.ParseScenario(data, ".")
		if err != nil {
			return nil, fmt.Errorf("generated family: %w", err)
		}
		return sc, nil
	case len(positional) == 1 && n == 0:
		return sim.LoadScenario(positional[0])
	}
	return nil, errUsage
}

// report writes the run's files into out and its table (or JSON) on stdout.
func report(res *sim.Results, out, imgPrefix string, asJSON bool, stdout io.Writer) error {
	if imgPrefix == "" {
		imgPrefix = "."
	}
	if err := res.WriteFiles(out, imgPrefix); err != nil {
		return err
	}
	if asJSON {
		return res.WriteJSON(stdout)
	}
	return res.WriteMarkdown(stdout, "")
}

// violated names every pacing invariant the run broke on stderr, and
// fails the run if any was.
func violated(res *sim.Results, stderr io.Writer) error {
	for _, v := range res.Violations {
		fmt.Fprintln(stderr, "pacing invariant broken:", v)
	}
	if n := len(res.Violations); n > 0 {
		return fmt.Errorf("%d pacing invariant violations (above)", n)
	}
	return nil
}

// optionalDuration is a duration flag that may be left unset (its help
// shows no default: the scenario's, else the daemon's, applies).
type optionalDuration struct {
	d   time.Duration
	set bool
}

func (o *optionalDuration) String() string {
	if o == nil || !o.set {
		return ""
	}
	return o.d.String()
}

func (o *optionalDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if d < 0 {
		return fmt.Errorf("%s is negative", s)
	}
	o.d, o.set = d, true
	return nil
}
