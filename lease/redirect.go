package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

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
// map, so that the next calls go straight to the slot's master. A call
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

// masterAt re-reads cc's slot map (ForEachMaster reads it afresh before it
// iterates) and returns its master at addr or, if the new map has none
// there (the node it was read from has not learned of it yet), the master
// it names for key.
func masterAt(ctx context.Context, cc *redis.ClusterClient, addr, key string) (*redis.Client, error) {
	var (
		mu sync.Mutex
		at *redis.Client
	)
	err := cc.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
		if m.Options().Addr == addr {
			mu.Lock()
			at = m
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("re-reading the slot map: %w", err)
	}
	if at != nil {
		return at, nil
	}
	return cc.MasterForKey(ctx, key)
}

// queueAsking queues ASKING on p if asking: the target of an ASK runs a
// command on a slot it is importing only right after ASKING, on the same
// connection.
func queueAsking(ctx context.Context, p redis.Pipeliner, asking bool) {
	if asking {
		p.Do(ctx, "asking")
	}
}
