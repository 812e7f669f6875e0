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
	var sc *sim.Scenario
	switch {
	case *family > 0 && len(positional) == 0:
		if *family > 1000 {
			return fmt.Errorf("--family %d: at most 1,000 campaigns", *family)
		}
		data := sim.Family(max(*seed, 1), *family, *curvesDir)
		if *writeScenario != "" {
			if err := os.WriteFile(*writeScenario, data, 0o644); err != nil {
				return err
			}
		}
		var err error
		if sc, err = sim.ParseScenario(data, "."); err != nil {
			return fmt.Errorf("generated family: %w", err)
		}
	case len(positional) == 1 && *family == 0:
		var err error
		if sc, err = sim.LoadScenario(positional[0]); err != nil {
			return err
		}
	default:
		fs.Usage()
		return errors.New("want exactly one scenario file, or --family N")
	}
	opt := sim.Options{RedisAddr: *redisAddr, RedisServer: *redisServer, Seed: *seed, Curve: *curve}
	if *warmup >= 0 {
		opt.Warmup = warmup
	}
	if sparseWait.set {
		opt.SparseWait = &sparseWait.d
	}
	if *trace != "" {
		if err := os.MkdirAll(*out, 0o755); err != nil {
			return err
		}
		f, err := os.Create(filepath.Join(*out, "trace.log"))
		if err != nil {
			return err
		}
		defer f.Close()
		w := bufio.NewWriter(f)
		defer w.Flush()
		opt.Trace = w
		if *trace != "all" {
			opt.TraceCampaigns = strings.Split(*trace, ",")
		}
	}
	if !*quiet {
		opt.Progress = stderr
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	res, err := sim.Run(ctx, sc, opt)
	if err != nil {
		return err
	}
	prefix := *imgPrefix
	if prefix == "" {
		prefix = "."
	}
	if err := res.WriteFiles(*out, prefix); err != nil {
		return err
	}
	if *asJSON {
		err = res.WriteJSON(stdout)
	} else {
		err = res.WriteMarkdown(stdout, "")
	}
	if err != nil {
		return err
	}
	return violated(res, stderr)
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
