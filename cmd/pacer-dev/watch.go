package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// probe is one part of the fleet the terminal is told about: check returns
// why it is not well, or nil.
type probe struct {
	name  string
	lost  string // said after the reason when it goes wrong
	check func(context.Context) error
}

// watchFleet runs every probe at each tick and prints a line whenever one
// changes between well and not well (the first round prints only what is
// not well), until ctx is cancelled. The dev fleet's daemons log to files:
// this is how a dead redis-server or a daemon refusing leases reaches the
// terminal. Probes run one after another; each bounds itself.
func watchFleet(ctx context.Context, out io.Writer, tick <-chan time.Time, now func() time.Time, probes []probe) {
	wrong := make([]string, len(probes)) // "" while well
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		for i, p := range probes {
			err := p.check(ctx)
			if ctx.Err() != nil {
				return
			}
			stamp := now().Format("15:04:05")
			switch {
			case err != nil && wrong[i] != err.Error():
				fmt.Fprintf(out, "pacer-dev %s: %s: %v%s\n", stamp, p.name, err, p.lost)
				wrong[i] = err.Error()
			case err == nil && wrong[i] != "":
				fmt.Fprintf(out, "pacer-dev %s: %s: ok again\n", stamp, p.name)
				wrong[i] = ""
			}
		}
	}
}

// probeTimeout bounds one probe: long, so that a loaded machine does not
// cry wolf; a dead server answers "connection refused" at once anyway.
const probeTimeout = 5 * time.Second

// redisProbe pings the ledger.
func redisProbe(rdb redis.UniversalClient, shown string) probe {
	return probe{
		name: "redis-server (ledger) " + shown,
		lost: "\n  the daemons serve from the leases they hold until those expire, then deny;" +
			" Ctrl-C and `make run` start it again on the same AOF",
		check: func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, probeTimeout)
			defer cancel()
			return rdb.Ping(ctx).Err()
		},
	}
}

// readyProbe asks a pacerd's /readyz, which names why it is not ready (the
// ledger unreachable, the durability policy or the clock check failing).
func readyProbe(name, url string) probe {
	client := &http.Client{Timeout: probeTimeout}
	return probe{
		name: name,
		check: func(ctx context.Context) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return err
			}
			resp, err := client.Do(req)
			if err != nil {
				return fmt.Errorf("no answer on %s: %w", url, err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s", strings.TrimSpace(string(body)))
			}
			return nil
		},
	}
}
