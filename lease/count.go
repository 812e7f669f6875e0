package lease

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Counting a caller's Redis commands. A reconciler pass wants to know what
// it cost Redis, but it shares its client with the daemon's lease calls, so
// the count follows the context: WithCommandCount marks a context, and
// every command the ledger sends under it (a pipeline's one by one) adds to
// its counter. New installs the hook that does it on the ledger's client;
// a client given to several ledgers counts each command once all the same.

type commandCountKey struct{}

type commandCountedKey struct{}

// WithCommandCount returns a context under which every Redis command a
// Ledger sends adds one to n. Commands under other contexts cost one
// context lookup.
func WithCommandCount(ctx context.Context, n *atomic.Int64) context.Context {
	return context.WithValue(ctx, commandCountKey{}, n)
}

type commandCounter struct{}

// counted adds k to ctx's counter, once however many counting hooks a
// client has, and returns the context to pass on.
func counted(ctx context.Context, k int) context.Context {
	n, ok := ctx.Value(commandCountKey{}).(*atomic.Int64)
	if !ok || ctx.Value(commandCountedKey{}) != nil {
		return ctx
	}
	n.Add(int64(k))
	return context.WithValue(ctx, commandCountedKey{}, true)
}

func (commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return next(counted(ctx, 1), cmd)
	}
}

func (commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return next(counted(ctx, len(cmds)), cmds)
	}
}
