package sim

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pacer/pacer/internal/redisproc"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
)

// Scripts and reads called at once from many goroutines share pipelines,
// and each caller gets its own command's reply: 64 goroutines each run a
// counter script 50 times on a real redis-server, each followed by a read of
// a key of its own that it last wrote with its latest value; every value
// 1..3,200 is answered exactly once, each read returns its caller's value,
// writes outside scripts go through unbatched, and the outer hook (the
// simulator's command counter) still sees every call.
func TestAutoPipeSharesPipelinesKeepsReplies(t *testing.T) {
	ctx := context.Background()
	srv, err := redisproc.Start(ctx, redisproc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	cnt := newCounter(nil, new(atomic.Bool), lease.KeyCampaign)
	rdb, err := newClient(srv.Socket, cnt)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	raw, err := lease.NewClientWith([]string{srv.Socket}, lease.ClientOptions{PoolSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	pipe := &autoPipe{raw: raw}
	rdb.AddHook(pipe)
	incr := redis.NewScript(`return redis.call('INCR', KEYS[1])`)
	if err := incr.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	const workers, calls = 64, 50
	seen := make([]int, workers*calls+1)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range workers {
		own := fmt.Sprintf("own:%d", w)
		wg.Go(func() {
			for range calls {
				v, err := incr.EvalSha(ctx, rdb, []string{"n"}).Int()
				if err != nil {
					t.Error(err)
					return
				}
				if err := rdb.Set(ctx, own, v, 0).Err(); err != nil {
					t.Error(err)
					return
				}
				if got, err := rdb.Get(ctx, own).Int(); err != nil || got != v {
					t.Errorf("worker %d read %d, %v; want its own %d", w, got, err, v)
					return
				}
				mu.Lock()
				if v >= 1 && v < len(seen) {
					seen[v]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for v := 1; v < len(seen); v++ {
		if seen[v] != 1 {
			t.Fatalf("value %d answered %d times; want once each", v, seen[v])
		}
	}
	if n, err := rdb.Get(ctx, "n").Int(); err != nil || n != workers*calls {
		t.Fatalf("GET n = %d, %v; want %d", n, err, workers*calls)
	}
	t.Logf("%d script calls and reads in %d pipelines", pipe.calls, pipe.batches)
	if want := int64(2*workers*calls + 1); pipe.calls != want || pipe.batches >= pipe.calls {
		t.Errorf("%d calls in %d pipelines: want %d calls (the scripts and the reads, not the SETs), sharing pipelines", pipe.calls, pipe.batches, want)
	}
	if got := cnt.total.Load(); got < 3*workers*calls+2 {
		t.Errorf("the counting hook saw %d commands; want every call", got)
	}
}
