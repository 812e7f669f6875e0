package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/config"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/reconcile"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdClient builds a client for --etcd with the --etcd-* credentials and
// TLS, as pacerd's config would give them.
func (a *app) etcdClient() (*clientv3.Client, error) {
	var eps []string
	for _, e := range strings.Split(a.etcdURLs, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	t := a.etcdTLS
	t.Enabled = t.CAFile != "" || t.CertFile != ""
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, usagef("--etcd-cert and --etcd-key go together")
	}
	if (a.etcdAuth.Username == "") != (a.etcdAuth.PasswordFile == "") {
		return nil, usagef("--etcd-user and --etcd-password-file go together")
	}
	eopt, err := config.EtcdClientOptions(eps, a.etcdAuth, t, config.Secrets{ReadFile: os.ReadFile})
	if err != nil {
		return nil, err
	}
	return clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		Username: eopt.Username, Password: eopt.Password, TLS: eopt.TLS})
}

// checkWatermarks compares each Redis master's write watermark with the one
// the elected reconciler recorded in etcd (reconcile.WatermarkStore): a
// master behind it came back with less than it acknowledged, and its
// shards of the campaigns' open days (yesterday on) are what the reconciler
// freezes. It prints a line per master (to stderr with --json) and returns
// how many are behind, or could not be compared although --etcd was given.
// Without --etcd it says that it could not compare.
func (a *app) checkWatermarks(ctx context.Context, l *lease.Ledger, ids []string) (failed int, err error) {
	out := a.stdout
	if a.json {
		out = a.stderr
	}
	if a.etcdURLs == "" {
		fmt.Fprintln(out, "unchecked watermark: could not compare each Redis master's watermark with the one the reconciler records in etcd: pass --etcd (or set PACER_ETCD); without it a Redis restored from an older copy under new daemons is not seen here")
		return 0, nil
	}
	masters, err := l.Masters(ctx)
	if err != nil {
		return 0, err
	}
	cli, err := a.etcdClient()
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	store := reconcile.NewEtcdWatermarks(cli)
	for _, m := range masters {
		got, had, err := l.ReadWatermark(ctx, m)
		if err != nil {
			return failed, err
		}
		rec, recorded, err := store.Load(ectx, m.Name)
		switch {
		case err != nil:
			failed++
			fmt.Fprintf(out, "FAIL watermark %s (%s): not compared: %v\n", m.Name, m.Addr, err)
		case !recorded:
			fmt.Fprintf(out, "ok watermark %s (%s): none recorded in etcd yet (no reconciler has passed with etcd)\n", m.Name, m.Addr)
		case got.Behind(rec):
			failed++
			found := "none"
			if had {
				found = got.String()
			}
			days, err := affectedDays(ctx, l, m, ids, a.now())
			if err != nil {
				return failed, err
			}
			fmt.Fprintf(out, "FAIL watermark %s (%s): Redis has %s, behind %s recorded in etcd: it lost acknowledged writes (restored from an older copy, or a lagging replica promoted); the reconciler freezes its shards of %s at its next pass; with pacer-export feeding PostgreSQL, run `pacerctl recover --from-sql DSN` while they are frozen to count what it recorded and the restore lost (docs/OPERATIONS.md)\n",
				m.Name, m.Addr, found, rec, orNone(days))
		default:
			fmt.Fprintf(out, "ok watermark %s (%s): Redis %s, etcd %s\n", m.Name, m.Addr, got, rec)
		}
	}
	return failed, nil
}

// affectedDays lists "campaign day" for each campaign-day from yesterday on
// (in its time zone) with a shard on master m.
func affectedDays(ctx context.Context, l *lease.Ledger, m lease.Master, ids []string, now time.Time) ([]string, error) {
	var out []string
	for _, id := range ids {
		c, err := l.GetCampaign(ctx, id)
		if err != nil {
			return nil, err
		}
		loc := c.Location()
		yesterday := bucket.DayOf(bucket.DayOf(now, loc).Start.Add(-time.Hour), loc).Key
		days, err := l.OpenDays(ctx, id)
		if err != nil {
			return nil, err
		}
		for _, day := range days {
			if day < yesterday {
				continue
			}
			n, err := l.DayShards(ctx, id, day)
			if err != nil {
				return nil, err
			}
			for i := range n {
				if m.Owns(lease.ShardKey{Campaign: id, Day: day, Shard: i}) {
					out = append(out, id+" "+day)
					break
				}
			}
		}
	}
	return out, nil
}

func orNone(days []string) string {
	if len(days) == 0 {
		return "no open day"
	}
	return strings.Join(days, ", ")
}
