package lease

import (
	"context"
	"net"

	"github.com/redis/go-redis/v9"
)

// OnDial calls fn after every connection rdb dials successfully, to any
// node of a Cluster, or to the master a Sentinel names. A Redis that
// restarted, or that a failover put in place, is only ever reached through
// new connections, so pacerd re-checks the durability policy at once
// instead of at the next periodic check. fn must not block; it runs on the
// dialling goroutine. Call OnDial before the client is used: Cluster nodes
// known by then are not hooked.
func OnDial(rdb redis.UniversalClient, fn func()) {
	h := dialHook{fn}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		cc.OnNewNode(func(n *redis.Client) { n.AddHook(h) })
		return
	}
	rdb.AddHook(h)
}

type dialHook struct{ fn func() }

func (h dialHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err == nil {
			h.fn()
		}
		return c, err
	}
}

func (dialHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (dialHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
