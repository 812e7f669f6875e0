package lease

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
)

// Cluster routing of the ledger's scripts under replicas:N. A script and
// its WAIT go to the master of the script's slot on one connection
// (Durability.runOn), the master taken from the Cluster client's slot map.
// go-redis follows MOVED and ASK only for the commands it routes itself
// (every other ledger command, and the scripts under fsync and none), so
// for these the ledger follows them itself, in runRouted.
//
// The rule: a ledger call answered MOVED, ASK or TRYAGAIN was not run.
// Redis checks the slot of every key a script declares before it runs the
// script, and answers so instead: MOVED, the node does not serve the slot;
// ASK, the slot is migrating and the keys are gone to the node named;
// TRYAGAIN, the slot is migrating and the keys are split between the two
// nodes. So the call is sent again unchanged (the same keys and arguments,
// hence the same lease, move or op id) to the node MOVED or ASK names, or
// after TRYAGAIN to the slot's master again once tryAgainWait has passed:
// it runs at most once. (Had it run, sending it again would still be safe:
// every ledger script is idempotent by its id, which is how runScript
// re-sends one whose reply was lost.) A MOVED re-reads the client's slot
// map, so that the next calls go straight to the slot's master; the calls
// answered MOVED at once share one read (slotMapReads). A call
// follows at most maxRedirects such answers; the next fails it with
// ErrRedirected, nothing having run.
const (
	maxRedirects = 6
	tryAgainWait = 50 * time.Millisecond
)

// runRouted runs s on the Cluster master of keys[0] with its WAIT (runOn),
// following MOVED, ASK and TRYAGAIN answers as the rule above says.
func (d Durability) runRouted(ctx context.Context, cc *redis.ClusterClient, s ledgerCall, keys []string, args ...any) *redis.Cmd {
	node, err := cc.MasterForKey(ctx, keys[0])
	asking := false
	var followed []string
	for {
		if err != nil {
			cmd := redis.NewCmd(ctx)
			cmd.SetErr(fmt.Errorf("routing to the master of %s: %w", keys[0], err))
			return cmd
		}
		cmd := d.runOn(ctx, node, asking, s, keys, args...)
		r, ok := redirectionOf(cmd.Err())
		if !ok {
			return cmd
		}
		if len(followed) == maxRedirects {
			cmd.SetErr(fmt.Errorf("%w (followed %s; then, from %s: %w)", ErrRedirected, strings.Join(followed, " "), nodeAddr(ctx, node), cmd.Err()))
			return cmd
		}
		followed = append(followed, r.kind)
		node, err = r.next(ctx, cc, keys[0])
		asking = r.kind == "ASK"
	}
}

// redirection is a Cluster's answer that a call was not run where it was
// sent: kind is MOVED, ASK or TRYAGAIN; addr is the node MOVED or ASK names.
type redirection struct{ kind, addr string }

// redirectionOf parses err as a redirection; ok is false for any other
// error, and for none.
func redirectionOf(err error) (r redirection, ok bool) {
	var rerr redis.Error
	if err == nil || !errors.As(err, &rerr) {
		return redirection{}, false
	}
	f := strings.Fields(rerr.Error())
	switch {
	case len(f) == 3 && (f[0] == "MOVED" || f[0] == "ASK"):
		return redirection{kind: f[0], addr: f[2]}, true
	case len(f) > 0 && f[0] == "TRYAGAIN":
		return redirection{kind: f[0]}, true
	}
	return redirection{}, false
}

// next is the node to send the call to after r: the master at r.addr (by a
// slot map read afresh) for MOVED and ASK; the slot's master after
// tryAgainWait for TRYAGAIN.
func (r redirection) next(ctx context.Context, cc *redis.ClusterClient, key string) (*redis.Client, error) {
	if r.kind == "TRYAGAIN" {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting to send again after TRYAGAIN: %w", ctx.Err())
		case <-time.After(tryAgainWait):
		}
		return cc.MasterForKey(ctx, key)
	}
	return masterAt(ctx, cc, r.addr, key)
}

// masterAt re-reads cc's slot map (slotMapOf: one read for the calls
// answered MOVED meanwhile) and returns its master at addr or, if the new
// map has none there (the node it was read from has not learned of it
// yet), the master it names for key.
func masterAt(ctx context.Context, cc *redis.ClusterClient, addr, key string) (*redis.Client, error) {
	masters, err := slotMapOf(cc).read(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("re-reading the slot map: %w", err)
	}
	if at := masters[addr]; at != nil {
		return at, nil
	}
	return cc.MasterForKey(ctx, key)
}

// slotMapReads coalesces a Cluster client's slot-map re-reads. After a
// failover every call in flight to the old master is answered MOVED at
// once; a re-read each was a CLUSTER SLOTS per call, on a Cluster that is
// recovering, bounded only by the calls in flight. The rule: a call
// answered MOVED joins the read in flight, if there is one, or starts one;
// so the calls of one wave share a read. A read that began just before a
// call's MOVED may not show the move yet; the call is then sent where the
// map says, answered MOVED again, and joins a later read (at most
// maxRedirects answers a call, as ever).
type slotMapReads struct {
	mu  sync.Mutex
	cur *slotMapRead // the read in flight; nil: none
}

// slotMapRead is one re-read of the slot map: done is closed when masters
// (by address) or err is set.
type slotMapRead struct {
	done    chan struct{}
	masters map[string]*redis.Client
	err     error
}

// slotMaps holds each Cluster client's slotMapReads, keyed weakly: an
// entry goes when its client is collected.
var slotMaps sync.Map // weak.Pointer[redis.ClusterClient] -> *slotMapReads

func slotMapOf(cc *redis.ClusterClient) *slotMapReads {
	key := weak.Make(cc)
	if m, ok := slotMaps.Load(key); ok {
		return m.(*slotMapReads)
	}
	m, loaded := slotMaps.LoadOrStore(key, new(slotMapReads))
	if !loaded {
		runtime.AddCleanup(cc, func(k weak.Pointer[redis.ClusterClient]) { slotMaps.Delete(k) }, key)
	}
	return m.(*slotMapReads)
}

// read returns the masters of the read in flight, or of one it starts. The
// read runs on its own, with ctx's values but not its cancellation (the
// client's timeouts bound it), so that one caller giving up fails none of
// the others; each caller waits as long as its own ctx allows.
func (m *slotMapReads) read(ctx context.Context, cc *redis.ClusterClient) (map[string]*redis.Client, error) {
	m.mu.Lock()
	r := m.cur
	if r == nil {
		r = &slotMapRead{done: make(chan struct{}), masters: map[string]*redis.Client{}}
		m.cur = r
		go m.run(context.WithoutCancel(ctx), cc, r)
	}
	m.mu.Unlock()
	select {
	case <-r.done:
		return r.masters, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// run reads the map (ForEachMaster reads it afresh before it iterates) into
// r, then lets the next MOVED start a new read.
func (m *slotMapReads) run(ctx context.Context, cc *redis.ClusterClient, r *slotMapRead) {
	var mu sync.Mutex
	r.err = cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		r.masters[c.Options().Addr] = c
		mu.Unlock()
		return nil
	})
	m.mu.Lock()
	m.cur = nil
	m.mu.Unlock()
	close(r.done)
}

// queueAsking queues ASKING on p if asking: the target of an ASK runs a
// command on a slot it is importing only right after ASKING, on the same
// connection.
func queueAsking(ctx context.Context, p redis.Pipeliner, asking bool) {
	if asking {
		p.Do(ctx, "asking")
	}
}
