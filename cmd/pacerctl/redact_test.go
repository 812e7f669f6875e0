package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/redisproc"
	"github.com/pacer/pacer/internal/redistest"
)

// TestNoPasswordInOutput drives every path on which pacerctl prints a
// Redis, NATS or etcd address, or an error quoting one, with a password in
// the URL: an unreachable Redis (one URL, TLS, Cluster seeds, from
// PACER_REDIS), malformed URLs, a Redis refusing the credentials, an
// unreachable NATS (user and password, token) and an unreachable etcd
// (status, check). Each says what failed, and no output shows the secret.
func TestNoPasswordInOutput(t *testing.T) {
	ledger := redistest.Start(t)
	tcp := redistest.StartWith(t, redisproc.Options{TCP: true})
	h := &harness{t: t, redis: ledger, global: []string{"--redis", ledger.Socket, "--curves", "../../configs/curves"}}
	h.ok("campaign", "set", "c1", "--daily", "5units")

	for _, tc := range []struct {
		name, secret string
		env          map[string]string
		args         []string
		want         string // in stderr: the path was taken, the address shown redacted
	}{
		{"redis unreachable", "RedisPw1", nil,
			[]string{"--redis", "redis://u:RedisPw1@127.0.0.1:1", "campaign", "list"},
			"no Redis ledger answers on --redis redis://u:xxxxx@127.0.0.1:1"},
		{"rediss unreachable", "RedisPw2", nil,
			[]string{"--redis", "rediss://u:RedisPw2@127.0.0.1:1", "campaign", "list"},
			"no Redis ledger answers on --redis rediss://u:xxxxx@127.0.0.1:1"},
		{"cluster seeds unreachable", "RedisPw3", nil,
			[]string{"--redis", "redis://u:RedisPw3@127.0.0.1:1,redis://u:RedisPw3@127.0.0.1:2", "campaign", "list"},
			"redis://u:xxxxx@127.0.0.1:1,redis://u:xxxxx@127.0.0.1:2"},
		{"PACER_REDIS unreachable", "RedisPw4", map[string]string{"PACER_REDIS": "redis://u:RedisPw4@127.0.0.1:1"},
			[]string{"campaign", "list"},
			"no Redis ledger answers on --redis redis://u:xxxxx@127.0.0.1:1"},
		{"bad port", "RedisPw5", nil,
			[]string{"--redis", "redis://u:RedisPw5@127.0.0.1:99999", "campaign", "list"},
			"--redis"},
		{"unparsable", "RedisPw6", nil,
			[]string{"--redis", "redis://u:RedisPw6@[::1", "campaign", "list"},
			"--redis"},
		{"escaped password", "Redis Pw7", nil,
			[]string{"--redis", "redis://u:Redis%20Pw7@127.0.0.1:1", "campaign", "list"},
			"redis://u:xxxxx@127.0.0.1:1"},
		{"wrong password", "RedisPw8", nil,
			[]string{"--redis", "redis://u:RedisPw8@" + tcp.Addr, "campaign", "list"},
			"WRONGPASS"},
		{"nats unreachable", "NatsPw9", nil,
			append(h.global, "--nats", "nats://u:NatsPw9@127.0.0.1:1", "campaign", "pause", "c1"),
			"nats://xxxxx@127.0.0.1:1"},
		{"nats token", "NatsToken10", nil,
			append(h.global, "--nats", "nats://NatsToken10@127.0.0.1:1", "campaign", "resume", "c1"),
			"nats://xxxxx@127.0.0.1:1"},
		{"etcd status", "EtcdPw11", nil,
			append(h.global, "--etcd", "http://u:EtcdPw11@127.0.0.1:1", "--timeout", "20s", "status"),
			"etcd http://u:xxxxx@127.0.0.1:1"},
		{"etcd check", "EtcdPw12", nil,
			append(h.global, "--etcd", "http://u:EtcdPw12@127.0.0.1:1", "--timeout", "20s", "check"),
			"etcd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			e := env{stdout: &out, stderr: &errOut, now: func() time.Time { return t0 },
				getenv: func(k string) string { return tc.env[k] }}
			code := run(context.Background(), e, tc.args)
			all := out.String() + errOut.String()
			if strings.Contains(all, tc.secret) || strings.Contains(all, strings.ReplaceAll(tc.secret, " ", "%20")) {
				t.Fatalf("the password shows (exit %d):\n%s", code, all)
			}
			if code == 0 || !strings.Contains(errOut.String(), tc.want) {
				t.Fatalf("exit %d, stderr does not say %q:\n%s", code, tc.want, all)
			}
		})
	}
}

// TestRedact: what redact replaces, and what it leaves alone.
func TestRedact(t *testing.T) {
	a := &app{redisAddrs: "redis://u:p@h:1, /run/redis.sock,redis://only-user@h:2", natsURL: "nats://tok@n:4222", etcdURLs: "http://e:q%40r@x:2379"}
	for in, want := range map[string]string{
		"dial redis://u:p@h:1: refused":  "dial redis://u:xxxxx@h:1: refused",
		"p and q and r stay":             "p and q and r stay",
		"redis://only-user@h:2":          "redis://only-user@h:2", // a user name is not a secret
		"nats://tok@n:4222":              "nats://xxxxx@n:4222",
		"http://e:q%40r@x:2379, e:q@r@x": "http://e:xxxxx@x:2379, e:xxxxx@x",
	} {
		if got := a.redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
}
