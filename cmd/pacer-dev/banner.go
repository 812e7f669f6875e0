package main

import (
	"fmt"
	"io"
)

// printBanner says what runs where and what to try.
func (f *fleet) printBanner(out io.Writer) {
	c := f.cfg
	admins := fmt.Sprintf("http://127.0.0.1:%d/metrics", c.adminPort)
	if c.hosts > 1 {
		admins += fmt.Sprintf(" … :%d", c.adminPort+c.hosts-1)
	}
	billing := "  PostgreSQL (billing)   not started (see above)\n"
	if f.billing != nil {
		billing = fmt.Sprintf("  PostgreSQL (billing)   %s (database pacer; a fresh one each run)\n"+
			"  pacer-export           every 500 ms; metrics http://127.0.0.1:%d/metrics, log %s/pacer-export.log\n",
			f.billing.dir, c.exportPort(), c.dir)
	}
	fmt.Fprintf(out, `
  pacer dev fleet is up (addresses also in %[1]s)
  ---------------------
  redis-server (ledger)  %[2]s
  etcd (election)        %[3]s
  NATS (broadcasts)      %[4]s
  pacerd sockets         %[5]s … (%[6]d hosts; logs in %[7]s/pacerd-*.log)
  admin (metrics)        %[8]s
%[9]s  campaign               demo: 86,400 units/day, flat curve (1,000,000 micros/s)

  Try, in another terminal:
    . %[1]s                                  # PACER_* for pacerctl
    redis-cli -s %[5]s SPEND demo 1000        # (integer) 1: allowed
    redis-cli -s %[5]s BALANCE demo
    redis-benchmark -s %[5]s -n 200000 -c 50 SPEND demo 1000   # far above pace: mostly 0 (paced)
    bin/pacerctl status          # SPENT grows as leases report back (every few seconds);
                                 # demo opened mid-day, so it starts behind the curve's TARGET
    bin/pacerctl campaign pause demo       # every host answers -1 within a NATS hop
    bin/pacerctl campaign resume demo
    bin/pacerctl check
%[10]s
  See pacing over a whole simulated day (10 to 20 s; redis-server of its own):
    bin/pacersim configs/scenarios/smoke.yaml --out %[7]s/sim && echo "plot: %[7]s/sim/sim-cumulative.png"

  Ctrl-C stops the fleet (leases go back to the ledger). This terminal says when the
  redis-server stops answering or a pacerd is not ready (its /readyz), and when it recovers.
`, rel(f.envPath()), rel(f.redis), f.etcd, f.nats, rel(f.sockets[0]), len(f.sockets), c.dir, admins, billing, f.sqlTry())
}

// sqlTry is what to try with PostgreSQL, if it runs.
func (f *fleet) sqlTry() string {
	if f.billing == nil {
		return ""
	}
	return `    psql "$PACER_SQL" -c "SELECT hour, round(spent / 1e6, 2) AS spent_units, events FROM spend_hours
      WHERE campaign = 'demo' AND day = current_date ORDER BY hour"   # today's spend per hour
    bin/pacerctl reconcile         # PostgreSQL's totals against the ledger's
    bin/pacerctl check --sql "$PACER_SQL"
`
}
