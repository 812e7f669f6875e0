package sim

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// watermarkKeyPrefix names every Redis master's watermark key
// (lease/watermark.go: pacer:watermark, pacer:watermark:{tag} on a Cluster).
const watermarkKeyPrefix = "pacer:watermark"

// watermarkGate orders the daemons' reads of the watermarks after the
// reconciler's watermark check of the same step, which runs beside the
// hosts' steps (runner.checkWatermarks) instead of before them:
//
//	every watermark a daemon reads in its step at t is the one the check at
//	t advanced, as when the check ran to its end before any host stepped.
//
// The daemons read a watermark only in their idle check, after the step's
// lease calls (daemon/idlecheck.go), so the check's two round trips to
// Redis overlap the hosts' first calls instead of delaying every step. It is
// a go-redis hook on the daemons' client, added before autoPipe; a command
// other than a read of a watermark key passes at once. The zero value holds
// nothing.
type watermarkGate struct {
	pending atomic.Pointer[chan struct{}] // nil, or closed when the step's check is done
	waiting atomic.Int32                  // reads held now (tests)
}

// hold makes the daemons' watermark reads wait until release.
func (g *watermarkGate) hold() {
	c := make(chan struct{})
	g.pending.Store(&c)
}

// release lets the held reads, and every later one, go.
func (g *watermarkGate) release() {
	if c := g.pending.Swap(nil); c != nil {
		close(*c)
	}
}

// watermarkRead reports whether cmd reads a master's watermark.
func watermarkRead(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 2 || !strings.EqualFold(cmd.Name(), "hmget") {
		return false
	}
	k, ok := args[1].(string)
	return ok && strings.HasPrefix(k, watermarkKeyPrefix)
}

// DialHook implements redis.Hook.
func (g *watermarkGate) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessPipelineHook implements redis.Hook: the daemons read watermarks one
// command at a time, never in a pipeline.
func (g *watermarkGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// ProcessHook implements redis.Hook.
func (g *watermarkGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if c := g.pending.Load(); c != nil && watermarkRead(cmd) {
			g.waiting.Add(1)
			select {
			case <-*c:
			case <-ctx.Done():
			}
			g.waiting.Add(-1)
			if err := ctx.Err(); err != nil {
				cmd.SetErr(err)
				return err
			}
		}
		return next(ctx, cmd)
	}
}
