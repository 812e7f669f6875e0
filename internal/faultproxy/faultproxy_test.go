package faultproxy_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/faultproxy"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/redis/go-redis/v9"
)

var ctx = context.Background()

func start(t *testing.T) (*redistest.Server, *faultproxy.Proxy) {
	t.Helper()
	srv := redistest.Start(t)
	p, err := faultproxy.Start(srv.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return srv, p
}

func client(t *testing.T, socket string, opt redis.Options) *redis.Client {
	t.Helper()
	opt.Network, opt.Addr = "unix", socket
	c := redis.NewClient(&opt)
	t.Cleanup(func() { c.Close() })
	return c
}

var incr = redis.NewScript(`return redis.call('INCR', KEYS[1])`)

// Everything a ledger client sends goes through unchanged, in RESP2 and RESP3:
// plain commands, pipelines, transactions, scripts returning tables, nil.
func TestPassThrough(t *testing.T) {
	_, p := start(t)
	for _, proto := range []int{2, 3} {
		c := client(t, p.Socket, redis.Options{Protocol: proto})
		if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
			t.Fatalf("RESP%d SET: %v", proto, err)
		}
		if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
			t.Fatalf("RESP%d GET = %q, %v", proto, v, err)
		}
		if err := c.Get(ctx, "missing").Err(); !errors.Is(err, redis.Nil) {
			t.Fatalf("RESP%d GET missing = %v, want redis.Nil", proto, err)
		}
		cmds, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HSet(ctx, "h", "a", 1, "b", 2)
			p.HGetAll(ctx, "h")
			return nil
		})
		if err != nil || len(cmds) != 2 {
			t.Fatalf("RESP%d MULTI: %v", proto, err)
		}
		if m := cmds[1].(*redis.MapStringStringCmd).Val(); m["a"] != "1" || m["b"] != "2" {
			t.Fatalf("RESP%d HGETALL in MULTI = %v", proto, m)
		}
		tbl := redis.NewScript(`return {1, 'two', {3}}`)
		if v, err := tbl.Run(ctx, c, nil).Slice(); err != nil || len(v) != 3 {
			t.Fatalf("RESP%d script table = %v, %v", proto, v, err)
		}
	}
	if p.Forwarded() == 0 || p.Fired() != 0 {
		t.Fatalf("forwarded %d, fired %d", p.Forwarded(), p.Fired())
	}
}

// A reset after a script: the script runs, the client never gets the reply,
// and go-redis (default retries) runs it again. That is the fault that makes a
// non-idempotent ledger script apply twice; with retries off the client sees
// the error and the script ran once.
func TestResetAfterScriptMakesGoRedisRetry(t *testing.T) {
	srv, p := start(t)
	direct := srv.Client()

	retrying := client(t, p.Socket, redis.Options{})
	if err := incr.Load(ctx, retrying).Err(); err != nil {
		t.Fatal(err)
	}
	p.ResetAfter(faultproxy.Scripts)
	n, err := incr.Run(ctx, retrying, []string{"retried"}).Int64()
	if err != nil {
		t.Fatalf("script through a reset with retries: %v", err)
	}
	if got := direct.Get(ctx, "retried").Val(); n != 2 || got != "2" {
		t.Fatalf("script returned %d, counter %s; want 2 and 2: the reset script ran and was retried", n, got)
	}
	if p.Fired() != 1 {
		t.Fatalf("fired %d resets, want 1", p.Fired())
	}

	noRetry := client(t, p.Socket, redis.Options{MaxRetries: -1})
	p.ResetAfter(faultproxy.Scripts)
	if err := incr.Run(ctx, noRetry, []string{"once"}).Err(); err == nil {
		t.Fatal("no error from a script whose reply was dropped")
	}
	if got := direct.Get(ctx, "once").Val(); got != "1" {
		t.Fatalf("counter %s, want 1: the script ran before the reset", got)
	}
	// Only the matching command is hit: a GET on the same proxy goes through.
	p.ResetAfter(faultproxy.Commands("incrby"))
	if err := noRetry.Get(ctx, "once").Err(); err != nil {
		t.Fatalf("GET hit by a reset armed for INCRBY: %v", err)
	}
	if p.Disarm() != 1 {
		t.Fatal("the INCRBY reset should still be armed")
	}
}

// A partition closes every connection and refuses new ones; Heal restores
// service.
func TestPartitionAndHeal(t *testing.T) {
	_, p := start(t)
	c := client(t, p.Socket, redis.Options{MaxRetries: -1})
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.Partition()
	for range 3 {
		if err := c.Ping(ctx).Err(); err == nil {
			t.Fatal("PING went through a partition")
		}
	}
	p.Heal()
	var err error
	for range 3 { // the pool may still hold a connection the partition closed
		if err = c.Ping(ctx).Err(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("PING after heal: %v", err)
	}
}

// A delay holds each command back; a client with a deadline gives up.
func TestDelay(t *testing.T) {
	_, p := start(t)
	c := client(t, p.Socket, redis.Options{MaxRetries: -1, ContextTimeoutEnabled: true})
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.SetDelay(200 * time.Millisecond)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := c.Ping(cctx).Err(); err == nil {
		t.Fatal("PING beat a 200ms delay with a 20ms deadline")
	}
	p.SetDelay(0)
	var err error
	for range 3 {
		if err = c.Ping(ctx).Err(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("PING after the delay was lifted: %v", err)
	}
}
