package sim

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"

	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
)

// newClient returns a client for addr (a Unix socket path or host:port) with
// the ledger's options (lease.NewClientWith), the baselines' too, so every
// strategy meets Redis through the same client. cnt sees each command once,
// ahead of the retry hook, and fails it at once while Redis is paused.
func newClient(addr string, cnt *counter) (redis.UniversalClient, error) {
	return lease.NewClientWith([]string{addr}, lease.ClientOptions{PoolSize: 64, Hooks: []redis.Hook{cnt}})
}

// errRedisPaused is what every command gets while the scenario has Redis
// paused.
var errRedisPaused = errors.New("sim: redis paused by the fault schedule")

// counter is a go-redis hook that counts every command sent through the
// client, attributes each to the campaign its first key names, and fails
// commands fast while the scenario pauses Redis.
type counter struct {
	total  atomic.Int64
	failed atomic.Int64
	byID   map[string]*atomic.Int64 // fixed before the run; read-only after
	other  atomic.Int64             // commands naming no known campaign
	paused *atomic.Bool
	keyID  func(key string) string
}

func newCounter(ids []string, paused *atomic.Bool, keyID func(string) string) *counter {
	c := &counter{byID: map[string]*atomic.Int64{}, paused: paused, keyID: keyID}
	for _, id := range ids {
		c.byID[id] = new(atomic.Int64)
	}
	return c
}

func (c *counter) count(cmd redis.Cmder) {
	c.total.Add(1)
	for _, a := range cmd.Args()[1:] {
		k, ok := a.(string)
		if !ok {
			continue
		}
		if id := c.keyID(k); id != "" {
			if n, ok := c.byID[id]; ok {
				n.Add(1)
				return
			}
		}
	}
	c.other.Add(1)
}

func (c *counter) campaign(id string) int64 {
	if n, ok := c.byID[id]; ok {
		return n.Load()
	}
	return 0
}

// DialHook implements redis.Hook.
func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if c.paused.Load() {
			c.failed.Add(1)
			cmd.SetErr(errRedisPaused)
			return errRedisPaused
		}
		c.count(cmd)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if c.paused.Load() {
			c.failed.Add(int64(len(cmds)))
			for _, cmd := range cmds {
				cmd.SetErr(errRedisPaused)
			}
			return errRedisPaused
		}
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}

// baselineKeyID returns the campaign of a baseline key: sim:lua:{c},
// sim:batch:{c}:N.
func baselineKeyID(k string) string {
	_, tag, ok := strings.Cut(k, "{")
	if !ok || !strings.HasPrefix(k, "sim:") {
		return ""
	}
	id, _, _ := strings.Cut(tag, "}")
	return id
}
