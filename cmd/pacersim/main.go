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

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("pacersim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "sim-out", "directory for results.json, results.md and the plots")
	asJSON := fs.Bool("json", false, "print the results as JSON on stdout (default: the Markdown table)")
	seed := fs.Uint64("seed", 0, "random seed (default: the scenario's)")
	redisAddr := fs.String("redis", "", "use this Redis (host:port or socket path; it must hold no pacer keys) instead of starting a redis-server")
	redisServer := fs.String("redis-server", "redis-server", "redis-server binary to start")
	imgPrefix := fs.String("img-prefix", "", "path the Markdown links the plots from (default: next to results.md)")
	quiet := fs.Bool("quiet", false, "no progress line")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	family := fs.Int("family", 0, "instead of a scenario file, run a family of N campaigns generated from --seed (default 1): budgets of 20 to 1,000,000 bids, demand 1x-3x, irregular traffic")
	curvesDir := fs.String("curves", "configs/curves", "curves directory a --family scenario names")
	writeScenario := fs.String("write-scenario", "", "with --family: also write the generated scenario to this file")
	warmup := fs.Duration("warmup", -1, "run the fleet this long (at most 24h) before the measured day, pacer only, nothing counted: a fleet that has run for days (default: the scenario's warmup)")
	curve := fs.String("curve", "", "pace every campaign by this curve instead of the scenario's (the traffic unchanged): one of its curves, or auto, fitted each day to the demand the fleet recorded the days before (with --warmup 24h, the day before's)")
	var sparseWait optionalDuration
	fs.Var(&sparseWait, "sparse-wait", "the daemons' lease.sparse_wait, a `duration`; 0s: off, sparse campaigns hold standing leases (default: the scenario's daemon.sparse_wait, else the daemon's)")
	trace := fs.String("trace", "", "write a line per SPEND (time, host, amount, answer, what the host held), and a minute a line per shard, of these campaigns (comma-separated; 'all' for every one) to trace.log in --out")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: pacersim SCENARIO.yaml [--out DIR] [--json] [--seed N] [--redis ADDR]")
		fmt.Fprintln(stderr, "       pacersim --family N [--seed S] [--write-scenario FILE] [--out DIR] ...")
		fs.PrintDefaults()
	}
	// Flags may come before or after the scenario path.
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil
			}
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	sc, err := scenario(*family, *seed, *curvesDir, *writeScenario, positional)
	if err != nil {
		if errors.Is(err, errUsage) {
			fs.Usage()
		}
		return err
	}
	opt := sim.Options{RedisAddr: *redisAddr, RedisServer: *redisServer, Seed: *seed, Curve: *curve}
	if *warmup >= 0 {
		opt.Warmup = warmup
	}
	if sparseWait.set {
		opt.SparseWait = &sparseWait.d
	}
	if *trace != "" {
		w, done, err := traceFile(*out)
		if err != nil {
			return err
		}
		defer done()
		opt.Trace = w
		if *trace != "all" {
			opt.TraceCampaigns = strings.Split(*trace, ",")
		}
	}
	if !*quiet {
		opt.Progress = stderr
	}
	if *cpuProfile != "" {
		stop, err := profile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	res, err := sim.Run(ctx, sc, opt)
	if err != nil {
		return err
	}
	if err := report(res, *out, *imgPrefix, *asJSON, stdout); err != nil {
		return err
	}
	return violated(res, stderr)
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
