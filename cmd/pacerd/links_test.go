package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/pacer/pacer"
	"github.com/pacer/pacer/internal/embedded"
	"github.com/pacer/pacer/internal/proctest"
	"github.com/pacer/pacer/internal/redisproc"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/internal/testcerts"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
)

const aclConf = "user pacerd on >ledger-pw ~* &* +@all\nuser default on >default-pw ~* &* +@all\n"

func secretFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A Redis that refuses pacerd's credentials stops it at start, with the
// reason, instead of a daemon that reports ready and answers every SPEND
// with an error. The password never shows in the error or the log.
func TestRedisAuthAtStart(t *testing.T) {
	srv := redistest.StartWith(t, redisproc.Options{Persistent: true, TCP: true, Conf: aclConf})

	log, err := runPacerdAt(t, srv.Addr, "")
	if err == nil || !strings.Contains(err.Error(), "refusing to start") || !strings.Contains(err.Error(), "NOAUTH") ||
		!strings.Contains(err.Error(), "redis_auth") {
		t.Fatalf("no password: %v\n%s", err, log)
	}

	wrong := secretFile(t, "not-the-pw\n")
	log, err = runPacerdAt(t, srv.Addr, fmt.Sprintf("redis_auth:\n  username: pacerd\n  password_file: %s\n", wrong))
	if err == nil || !strings.Contains(err.Error(), "refusing to start") || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("wrong password: %v\n%s", err, log)
	}
	if strings.Contains(err.Error()+log, "not-the-pw") {
		t.Fatalf("the password shows: %v\n%s", err, log)
	}

	right := secretFile(t, "ledger-pw\n")
	log, err = runPacerdAt(t, srv.Addr, fmt.Sprintf("redis_auth:\n  username: pacerd\n  password_file: %s\n", right))
	if err != nil || !strings.Contains(log, "ledger durability verified") {
		t.Fatalf("password_file: %v\n%s", err, log)
	}

	t.Setenv("PACER_REDIS_PASSWORD", "default-pw")
	log, err = runPacerdAt(t, srv.Addr, "")
	if err != nil || !strings.Contains(log, "ledger durability verified") {
		t.Fatalf("PACER_REDIS_PASSWORD: %v\n%s", err, log)
	}
	if strings.Contains(log, "default-pw") {
		t.Fatalf("the password shows in the log:\n%s", log)
	}
}

// pacerd over TLS with client certificates and an ACL user, from a
// rediss:// URL: it serves, and the URL in its log has no password.
func TestRedisTLSAtStart(t *testing.T) {
	certs, err := testcerts.New(t.TempDir(), "redis", "pacerd")
	if err != nil {
		t.Fatal(err)
	}
	srv := redistest.StartWith(t, redisproc.Options{Persistent: true, Conf: aclConf,
		TLS: &redisproc.TLS{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, CAFile: certs.CA, ClientCerts: true}})
	tlsConf := fmt.Sprintf("redis_tls:\n  enabled: true\n  ca_file: %s\n  cert_file: %s\n  key_file: %s\n", certs.CA, certs.ClientCert, certs.ClientKey)
	log, err := runPacerdAt(t, "rediss://pacerd:ledger-pw@"+srv.Addr, tlsConf)
	if err != nil || !strings.Contains(log, "ledger durability verified") {
		t.Fatalf("rediss:// with client certificates: %v\n%s", err, log)
	}
	if strings.Contains(log, "ledger-pw") || !strings.Contains(log, "rediss://pacerd:xxxxx@") {
		t.Fatalf("the log does not redact the URL:\n%s", log)
	}

	// Without the private CA: the server's certificate does not verify.
	log, err = runPacerdAt(t, "rediss://pacerd:ledger-pw@"+srv.Addr, "")
	if err == nil || !strings.Contains(err.Error(), "refusing to start") || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the CA: %v\n%s", err, log)
	}
}

// With NATS and no broadcast key, pacerd warns; with a key it does not; a
// key too short refuses the start. NATS credentials come from nats_auth and
// the URL in the log has no password.
func TestBroadcastKeyAtStart(t *testing.T) {
	srv := redistest.StartWith(t, redisproc.Options{Persistent: true})
	n, err := embedded.StartNATSWith(func(o *natsserver.Options) {
		o.Users = []*natsserver.User{{Username: "pacerd", Password: "nats-pw"}}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	pw := secretFile(t, "nats-pw\n")
	natsConf := fmt.Sprintf("nats: %q\nnats_auth:\n  username: pacerd\n  password_file: %s\n", n.URL, pw)

	log, err := runPacerdAt(t, srv.Socket, natsConf)
	if err != nil || !strings.Contains(log, "broadcast.key_file not set") || strings.Contains(log, "NATS connection attempt failed") {
		t.Fatalf("no key: %v\n%s", err, log)
	}
	key := secretFile(t, "0123456789abcdef0123456789abcdef\n")
	log, err = runPacerdAt(t, srv.Socket, natsConf+"broadcast:\n  key_file: "+key+"\n")
	if err != nil || strings.Contains(log, "broadcast.key_file not set") || strings.Contains(log, "nats-pw") ||
		strings.Contains(log, "NATS connection attempt failed") {
		t.Fatalf("with a key: %v\n%s", err, log)
	}
	wrong := secretFile(t, "not-the-pw\n")
	log, _ = runPacerdAt(t, srv.Socket, fmt.Sprintf("nats: %q\nnats_auth:\n  username: pacerd\n  password_file: %s\n", n.URL, wrong))
	if !strings.Contains(log, "NATS connection attempt failed") || !strings.Contains(log, "uthorization") {
		t.Fatalf("wrong NATS password: the log does not say so:\n%s", log)
	}
	short := secretFile(t, "short\n")
	_, err = runPacerdAt(t, srv.Socket, natsConf+"broadcast:\n  key_file: "+short+"\n")
	if err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Fatalf("short key: %v", err)
	}
}

// restrictedACL is the narrowest Redis ACL docs/SECURITY.md recommends for the
// daemons: keys under pacer: only, no channels, and only the command
// categories and commands the ledger, its scripts and the durability and
// clock checks use. The default user is the operator's (all rights).
const restrictedACL = "user pacerd on >ledger-pw ~pacer:* resetchannels -@all +@read +@write +@scripting +@transaction +@connection " +
	"+time +info +config|get -keys -flushall -flushdb\n" +
	"user default on >admin-pw ~* &* +@all\n"

// pacerd runs and spends against a Redis that grants its user only
// restrictedACL: the durability and clock checks pass, a day opens, a lease
// is granted, and a SPEND is allowed.
func TestRestrictedRedisACL(t *testing.T) {
	srv := redistest.StartWith(t, redisproc.Options{Persistent: true, Conf: restrictedACL})
	admin := redis.NewClient(&redis.Options{Network: "unix", Addr: srv.Socket, Password: "admin-pw"})
	t.Cleanup(func() { admin.Close() })
	ledger := lease.New(admin, lease.Config{}, nil)
	if _, err := ledger.PutCampaign(ctx, lease.Campaign{ID: "c", DailyMicros: 86_400_000_000, TZ: "UTC", Curve: "flat", Shards: 2, State: lease.StateActive}); err != nil {
		t.Fatal(err)
	}
	// What the user may not do: keys outside pacer:, KEYS, FLUSHALL.
	probe := redis.NewClient(&redis.Options{Network: "unix", Addr: srv.Socket, Username: "pacerd", Password: "ledger-pw"})
	t.Cleanup(func() { probe.Close() })
	for name, err := range map[string]error{
		"SET other:key": probe.Set(ctx, "other:key", "1", 0).Err(),
		"KEYS *":        probe.Keys(ctx, "*").Err(),
		"FLUSHALL":      probe.FlushAll(ctx).Err(),
		"CONFIG SET":    probe.ConfigSet(ctx, "appendfsync", "no").Err(),
		"PUBLISH chan":  probe.Publish(ctx, "chan", "x").Err(),
	} {
		if err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("%s as pacerd: %v, want NOPERM", name, err)
		}
	}

	dir := t.TempDir()
	pw := secretFile(t, "ledger-pw\n")
	cfg := filepath.Join(dir, "pacerd.yaml")
	// With etcd, this daemon is also the reconciler, under the same ACL.
	etcd, err := embedded.StartEtcd(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	conf := testConfig + fmt.Sprintf("redis_auth:\n  username: pacerd\n  password_file: %s\netcd: [%q]\n", pw, etcd.Endpoint)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "p.sock")
	var stdout, stderr proctest.Buffer
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- run(runCtx, []string{"--config", cfg, "--redis", srv.Socket, "--socket", sock, "--holder", "h",
			"--curves", filepath.Join(dir, "none"), "--state-dir", filepath.Join(dir, "state")}, &stdout, &stderr)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("pacerd: %v\n%s", err, stderr.String())
		}
		if strings.Contains(stderr.String(), "NOPERM") {
			t.Errorf("pacerd met NOPERM:\n%s", stderr.String())
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pacerd did not serve within 10s:\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	c := dial(t, sock)
	var dec pacer.Decision
	for deadline := time.Now().Add(10 * time.Second); dec != pacer.Allowed; time.Sleep(20 * time.Millisecond) {
		var err error
		if dec, err = c.Spend(ctx, "c", 1000, "a1"); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("SPEND never allowed under the restricted ACL:\n%s", stderr.String())
		}
	}
	if err := c.Refund(ctx, "c", 1000, "a1"); err != nil {
		t.Fatalf("REFUND: %v", err)
	}
	// A few reconciler passes (1 s each) over leases of a 2 s window.
	for deadline := time.Now().Add(15 * time.Second); !strings.Contains(stderr.String(), "elected reconciler"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not elected within 15s:\n%s", stderr.String())
		}
	}
	for end := time.Now().Add(3500 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if _, err := c.Spend(ctx, "c", 1000, ""); err != nil {
			t.Fatal(err)
		}
	}
}
