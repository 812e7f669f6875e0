package main

import (
	"strings"
	"testing"

	"github.com/pacer/pacer/internal/redisproc"
	"github.com/pacer/pacer/internal/redistest"
)

// TestNoPasswordInPacerdOutput drives pacerd's start through every path
// that prints a Redis, NATS or etcd address, or an error quoting one, with
// a password in the URL: an unreachable Redis, malformed Redis, NATS and
// etcd URLs, a Redis refusing the credentials, and an unreachable NATS.
// Neither the error run returns nor the log shows the secret.
func TestNoPasswordInPacerdOutput(t *testing.T) {
	ledger := redistest.StartWith(t, redisproc.Options{Persistent: true})
	tcp := redistest.StartWith(t, redisproc.Options{TCP: true})
	for _, tc := range []struct {
		name, secret, redis, extra string
		fails                      bool
	}{
		// pacerd starts without its ledger and serves from held leases.
		{"redis unreachable", "PdRedis1", "redis://u:PdRedis1@127.0.0.1:1", "", false},
		{"redis bad port", "PdRedis2", "redis://u:PdRedis2@127.0.0.1:99999", "", true},
		{"redis unparsable", "PdRedis3", "redis://u:PdRedis3@[::1", "", true},
		{"redis wrong password", "PdRedis4", "redis://u:PdRedis4@" + tcp.Addr, "", true},
		{"nats unreachable", "PdNats5", ledger.Socket, "nats: nats://u:PdNats5@127.0.0.1:1\n", false},
		{"nats unparsable", "PdNats6", ledger.Socket, "nats: \"nats://u:PdNats6@[::1\"\n", true},
		{"nats bad scheme", "PdNats7", ledger.Socket, "nats: ftp://u:PdNats7@127.0.0.1:1\n", true},
		{"etcd credentials", "PdEtcd8", ledger.Socket, "etcd: [\"http://u:PdEtcd8@127.0.0.1:1\"]\n", true},
		{"etcd bad scheme", "PdEtcd9", ledger.Socket, "etcd: [\"ftp://u:PdEtcd9@127.0.0.1:1\"]\n", true},
		{"etcd unparsable", "PdEtcd10", ledger.Socket, "etcd: [\"http://u:PdEtcd10@[::1\"]\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log, err := runPacerdAt(t, tc.redis, tc.extra)
			out := log
			if err != nil {
				out += "\n" + err.Error()
			}
			if strings.Contains(out, tc.secret) {
				t.Fatalf("the password shows:\n%s", out)
			}
			if (err != nil) != tc.fails {
				t.Fatalf("run = %v, want failure %v\n%s", err, tc.fails, log)
			}
		})
	}
}
