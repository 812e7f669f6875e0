package reconcile_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
)

// batcher is a go-redis hook that sends the single commands of many
// goroutines to Redis together, in shared pipelines of up to batchMost,
// instead of one round trip each: the fill of a scale fixture runs the
// ledger's own calls (PutCampaign, OpenDay) from hundreds of goroutines,
// so it writes exactly what they write, at a fraction of the round trips
// and of the client's and the server's CPU. Each caller still waits for
// its own command's reply, so the calls of one goroutine keep their order.
type batcher struct {
	raw redis.UniversalClient // the client that sends the pipelines (no batcher hook)
	in  chan batched
}

type batched struct {
	ctx  context.Context
	cmd  redis.Cmder
	done chan struct{}
}

const batchMost = 1024

// newBatcher starts flushers sending raw's pipelines; stop ends them once
// no command is in flight.
func newBatcher(raw redis.UniversalClient, flushers int) (b *batcher, stop func()) {
	b = &batcher{raw: raw, in: make(chan batched, batchMost)}
	var wg sync.WaitGroup
	for range flushers {
		wg.Go(b.flush)
	}
	return b, func() { close(b.in); wg.Wait() }
}

// flush sends what is queued, one pipeline at a time, until in is closed.
func (b *batcher) flush() {
	batch := make([]batched, 0, batchMost)
	for first := range b.in {
		batch = append(batch[:0], first)
	more:
		for len(batch) < batchMost {
			select {
			case c, ok := <-b.in:
				if !ok {
					break more
				}
				batch = append(batch, c)
			default:
				break more
			}
		}
		// Errors are each command's own (set on it); Exec's is the first.
		_, _ = b.raw.Pipelined(context.Background(), func(p redis.Pipeliner) error {
			for _, c := range batch {
				_ = p.Process(c.ctx, c.cmd)
			}
			return nil
		})
		for _, c := range batch {
			close(c.done)
		}
	}
}

func (b *batcher) DialHook(next redis.DialHook) redis.DialHook { return next }

func (b *batcher) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c := batched{ctx: ctx, cmd: cmd, done: make(chan struct{})}
		b.in <- c
		<-c.done
		return cmd.Err()
	}
}

func (b *batcher) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// fillCampaigns stores campaigns c<from>…c<to-1> of 8 shards (flat curve,
// a currency unit a second) through the ledger's own calls, each with
// days[i] opened at dayStarts[i], from 256 goroutines whose commands share
// pipelines (batcher): newClient returns a new client for the same Redis
// (a Cluster's, for a Cluster), two are made.
func fillCampaigns(tb testing.TB, newClient func() redis.UniversalClient, from, to int, days []string, dayStarts []time.Time) {
	tb.Helper()
	raw, front := newClient(), newClient()
	defer raw.Close()
	defer front.Close()
	b, stop := newBatcher(raw, 4)
	front.AddHook(b)
	store := lease.New(front, lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	const workers = 256
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := from + w; i < to; i += workers {
				if err := storeCampaign(store, "c"+strconv.Itoa(i), days, dayStarts); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	stop()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
}

// storeCampaign is one campaign of the scale fixtures: stored, and its days
// opened, as the API and the fleet do.
func storeCampaign(store *lease.Ledger, id string, days []string, dayStarts []time.Time) error {
	c, err := store.PutCampaign(ctx, lease.Campaign{ID: id, DailyMicros: 86_400_000_000, TZ: "UTC", Curve: "flat", Shards: 8, State: lease.StateActive})
	for i := 0; err == nil && i < len(days); i++ {
		_, err = store.OpenDay(ctx, c, days[i], dayStarts[i], dayStarts[i])
	}
	return err
}

// The batched fill writes exactly what the ledger's calls write one by one:
// every key, its type, its content (streams: their entries' fields, not
// their ids, which are Redis's clock) and whether it expires.
func TestFillWritesWhatTheLedgerWrites(t *testing.T) {
	days := []string{"2026-11-20", day}
	starts := []time.Time{midnight.Add(-24 * time.Hour), midnight}
	batchedSrv, plainSrv := newFixture(t).Redis, newFixture(t).Redis
	fillCampaigns(t, func() redis.UniversalClient { return batchedSrv.Client() }, 0, 40, days, starts)
	plain := lease.New(plainSrv.Client(), lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	for i := range 40 {
		if err := storeCampaign(plain, "c"+strconv.Itoa(i), days, starts); err != nil {
			t.Fatal(err)
		}
	}
	got, want := redisContent(t, batchedSrv.Client()), redisContent(t, plainSrv.Client())
	if len(want) < 40*(2+2*8) {
		t.Fatalf("the ledger's calls wrote %d keys for 40 campaigns: fewer than their shards", len(want))
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			t.Errorf("key %s: batched fill wrote %.300q, the ledger's calls one by one %.300q", k, g, w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("key %s: written by the batched fill only", k)
		}
	}
	t.Logf("%d keys alike", len(want))
}

// redisContent is every key's type, content and whether it expires, as text.
func redisContent(t *testing.T, c *redis.Client) map[string]string {
	t.Helper()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		typ := c.Type(ctx, k).Val()
		var v any
		switch typ {
		case "hash":
			v = c.HGetAll(ctx, k).Val()
		case "set":
			m := c.SMembers(ctx, k).Val()
			slices.Sort(m)
			v = m
		case "zset":
			v = c.ZRangeWithScores(ctx, k, 0, -1).Val()
		case "string":
			v = c.Get(ctx, k).Val()
		case "stream":
			var fields []map[string]any
			for _, m := range c.XRange(ctx, k, "-", "+").Val() {
				fields = append(fields, m.Values)
			}
			if k == "pacer:campaigns:changes" { // in the order the writers came
				slices.SortFunc(fields, func(a, b map[string]any) int { return cmpID(a["id"], b["id"]) })
			}
			v = fields
		default:
			v = "?"
		}
		out[k] = fmt.Sprintf("%s expires=%v %v", typ, c.PTTL(ctx, k).Val() > 0, v)
	}
	return out
}

func cmpID(a, b any) int {
	x, _ := a.(string)
	y, _ := b.(string)
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}
