package redistest

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Snapshot is every key of a Redis, DUMPed: a backup to restore later.
func Snapshot(tb testing.TB, c *redis.Client) map[string]string {
	tb.Helper()
	ctx := context.Background()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		if out[k], err = c.Dump(ctx, k).Result(); err != nil {
			tb.Fatal(err)
		}
	}
	return out
}

// RestoreSnapshot makes a Redis hold exactly snap: restored from a backup,
// everything written since lost.
func RestoreSnapshot(tb testing.TB, c *redis.Client, snap map[string]string) {
	tb.Helper()
	ctx := context.Background()
	if err := c.FlushAll(ctx).Err(); err != nil {
		tb.Fatal(err)
	}
	for k, v := range snap {
		if err := c.RestoreReplace(ctx, k, 0, v).Err(); err != nil {
			tb.Fatal(err)
		}
	}
}
