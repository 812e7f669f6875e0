package redisretry

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/redis/go-redis/v9"
)

// lossy fails its first n calls with a network error, as a pooled connection
// that Redis or the network closed would.
func lossy(n int, calls *int) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		*calls++
		if *calls <= n {
			err := &net.OpError{Op: "read", Net: "unix", Err: errors.New("connection reset by peer")}
			cmd.SetErr(err)
			return err
		}
		return nil
	}
}

func TestReadsRetriesOnlyWhatIsSafeTwice(t *testing.T) {
	ctx := context.Background()
	calls := 0
	for _, tc := range []struct {
		cmd       redis.Cmder
		fails     int
		wantCalls int
		wantErr   bool
	}{
		{redis.NewStringCmd(ctx, "hmget", "k", "f"), 2, 3, false},
		{redis.NewBoolCmd(ctx, "hsetnx", "k", "f", "v"), 1, 2, false},
		{redis.NewStatusCmd(ctx, "set", "k", "v", "nx"), 1, 2, false},
		{redis.NewIntCmd(ctx, "hincrby", "k", "f", 1), 1, 1, true}, // counts twice if sent twice
		{redis.NewCmd(ctx, "evalsha", "sha", 0), 1, 1, true},       // the ledger retries scripts by id
		{redis.NewStringCmd(ctx, "get", "k"), readAttempts + 5, readAttempts, true},
	} {
		calls = 0
		err := Reads{}.ProcessHook(lossy(tc.fails, &calls))(ctx, tc.cmd)
		if calls != tc.wantCalls || (err != nil) != tc.wantErr {
			t.Errorf("%v: %d calls, err %v; want %d calls, error %v", tc.cmd.Args(), calls, err, tc.wantCalls, tc.wantErr)
		}
	}
	// Nor is a failure to connect: the next dial would fail the same way.
	calls = 0
	_ = Reads{}.ProcessHook(func(ctx context.Context, cmd redis.Cmder) error {
		calls++
		return &net.OpError{Op: "dial", Net: "unix", Err: errors.New("connect: connection refused")}
	})(ctx, redis.NewStringCmd(ctx, "get", "k"))
	if calls != 1 {
		t.Errorf("a refused dial retried: %d calls", calls)
	}
	// An answer from Redis (an error reply) is not retried.
	calls = 0
	_ = Reads{}.ProcessHook(func(ctx context.Context, cmd redis.Cmder) error {
		calls++
		return redis.Nil
	})(ctx, redis.NewStringCmd(ctx, "get", "k"))
	if calls != 1 {
		t.Errorf("redis.Nil retried: %d calls", calls)
	}
}
