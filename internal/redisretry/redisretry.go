// Package redisretry is the ledger's retry policy for Redis commands: go-redis's
// own retries are off (a plain HINCRBY sent twice counts twice), and only
// commands that are safe to send twice are retried after a network error.
package redisretry

import (
	"context"
	"errors"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Reads is a go-redis hook that retries, after a network error, the
// commands that are safe to send twice: reads, and writes that change
// nothing the second time (HSETNX, SETNX, SADD). go-redis's own retries are
// off for the ledger (a plain HINCRBY sent twice counts twice; a script is
// retried by the ledger itself, by its id), but a read must not fail just
// because the pool handed it a connection that Redis or the network closed.
// lease.NewClient adds it; add it to any client given to lease.New.
type Reads struct{}

var _ redis.Hook = Reads{}

// readAttempts bounds how many times a command is sent. Each failed attempt
// drops the dead connection it used, and after a Redis restart or a cut the
// pool may hold several: failing over them costs nothing (no wait).
const readAttempts = 10

var idempotentCommands = map[string]bool{
	"get": true, "exists": true, "hget": true, "hmget": true, "hgetall": true, "hkeys": true,
	"hvals": true, "hexists": true, "smembers": true, "xrange": true, "pttl": true, "ttl": true,
	"ping": true, "time": true, "info": true, "config": true, "hsetnx": true, "setnx": true,
	"sadd": true, "multi": true, "exec": true, "keys": true, "scan": true, "hscan": true,
}

func idempotent(cmd redis.Cmder) bool {
	name := strings.ToLower(cmd.Name())
	if name == "set" { // SET ... NX is SetNX
		for _, a := range cmd.Args() {
			if s, ok := a.(string); ok && strings.EqualFold(s, "nx") {
				return true
			}
		}
		return false
	}
	return idempotentCommands[name]
}

// DialHook implements redis.Hook.
func (Reads) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (Reads) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		for attempt := 1; err != nil && attempt < readAttempts && idempotent(cmd) && Retriable(err) && ctx.Err() == nil; attempt++ {
			cmd.SetErr(nil)
			err = next(ctx, cmd)
		}
		return err
	}
}

// ProcessPipelineHook implements redis.Hook: a pipeline (or MULTI/EXEC) is
// retried only if every command in it is safe to send twice.
func (Reads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err == nil || !Retriable(err) {
			return err
		}
		for _, c := range cmds {
			if !idempotent(c) {
				return err
			}
		}
		for attempt := 1; err != nil && attempt < readAttempts && Retriable(err) && ctx.Err() == nil; attempt++ {
			for _, c := range cmds {
				c.SetErr(nil)
			}
			err = next(ctx, cmds)
		}
		return err
	}
}

// Retriable reports whether err came from a connection that broke under the
// command (its reply lost, or a pooled connection found dead), so that
// sending it again on another connection may succeed. An answer from Redis
// (an error reply, redis.Nil) is not; nor is a failure to connect at all:
// the next attempt would fail the same way, and each failed dial counts
// towards go-redis's pool backing off its dials for a second.
func Retriable(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) {
		return false
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return false // an error reply: Redis ran or refused it
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	return true
}
