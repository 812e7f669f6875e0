package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/broadcast"
	"github.com/pacer/pacer/config"
	"github.com/pacer/pacer/internal/embedded"
	"github.com/pacer/pacer/internal/redisproc"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/internal/testcerts"
	"github.com/pacer/pacer/reconcile"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// pacerctl reaches a Redis with TLS, client certificates and an ACL user,
// the password from a file or the environment; a wrong one is a clear
// error that does not show the password.
func TestRedisSecured(t *testing.T) {
	dir := t.TempDir()
	certs, err := testcerts.New(dir, "redis", "operator")
	if err != nil {
		t.Fatal(err)
	}
	srv := redistest.StartWith(t, redisproc.Options{Persistent: true,
		Conf: "user operator on >op-pw ~* &* +@all\nuser default on >default-pw ~* &* +@all\n",
		TLS:  &redisproc.TLS{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, CAFile: certs.CA, ClientCerts: true}})
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte("op-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsFlags := []string{"--redis", srv.Addr, "--redis-ca", certs.CA, "--redis-cert", certs.ClientCert, "--redis-key", certs.ClientKey}

	r := runEnv(nil, append(tlsFlags, "--redis-user", "operator", "--redis-password-file", pwFile, "campaign", "set", "c1", "--daily", "5units")...)
	if r.code != 0 {
		t.Fatalf("password file: exit %d: %s", r.code, r.stderr)
	}
	r = runEnv(map[string]string{"REDISCLI_AUTH": "default-pw"}, append(tlsFlags, "campaign", "get", "c1")...)
	if r.code != 0 || !strings.Contains(r.stdout, `"daily_micros": 5000000`) {
		t.Fatalf("REDISCLI_AUTH: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	r = runEnv(map[string]string{"PACER_REDIS_PASSWORD": "wrong-pw"}, append(tlsFlags, "campaign", "get", "c1")...)
	if r.code != exitFailure || !strings.Contains(r.stderr, "WRONGPASS") || strings.Contains(r.stderr, "wrong-pw") {
		t.Fatalf("wrong password: exit %d: %s", r.code, r.stderr)
	}
	r = runEnv(nil, "--redis", srv.Addr, "--redis-tls", "campaign", "get", "c1")
	if r.code != exitFailure || !strings.Contains(r.stderr, "certificate") {
		t.Fatalf("without the CA: exit %d: %s", r.code, r.stderr)
	}
	r = runEnv(nil, "--redis", srv.Addr, "--redis-cert", certs.ClientCert, "campaign", "get", "c1")
	if r.code != exitUsage {
		t.Fatalf("--redis-cert without --redis-key: exit %d: %s", r.code, r.stderr)
	}
}

// status reads the election from an etcd that demands client certificates
// signed by a private CA.
func TestStatusOverEtcdTLS(t *testing.T) {
	h := newHarness(t)
	certs, err := testcerts.New(t.TempDir(), "etcd", "operator")
	if err != nil {
		t.Fatal(err)
	}
	e, err := embedded.StartEtcdWith(t.TempDir(), embedded.EtcdOptions{CertFile: certs.ServerCert, KeyFile: certs.ServerKey,
		CAFile: certs.CA, ClientCertAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	tc, err := config.TLS{Enabled: true, CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}.Config(os.ReadFile)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint}, TLS: tc, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	cctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := reconcile.NewEtcdElector(cli, "host-a", 5).Campaign(cctx); err != nil {
		t.Fatal(err)
	}
	out := h.ok("--etcd", e.Endpoint, "--etcd-ca", certs.CA, "--etcd-cert", certs.ClientCert, "--etcd-key", certs.ClientKey, "status")
	if !strings.HasPrefix(out, "reconciler: leader host-a") {
		t.Errorf("status with the client certificate: %q", out)
	}
	r := h.run("--etcd", e.Endpoint, "--etcd-ca", certs.CA, "--timeout", "3s", "status")
	if r.code != exitFailure || strings.Contains(r.stdout, "leader host-a") {
		t.Errorf("status without a client certificate: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// pacerctl signs its broadcasts with --broadcast-key-file: a receiver with
// the fleet's key acts on them; without the flag its events are rejected as
// unsigned.
func TestSignedBroadcastFromPacerctl(t *testing.T) {
	h := newHarness(t)
	n, err := embedded.StartNATS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	key := []byte("the fleet's broadcast key, 32 bytes or more")
	keyFile := filepath.Join(t.TempDir(), "broadcast.key")
	if err := os.WriteFile(keyFile, append(key, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	sub, err := broadcast.ConnectWith(n.URL, broadcast.Options{Keys: [][]byte{key}, MaxAge: 10 * time.Second,
		Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Close)
	events := make(chan pacer.Event, 4)
	if err := sub.Subscribe(func(e pacer.Event) { events <- e }); err != nil {
		t.Fatal(err)
	}
	sub.Flush(5 * time.Second)

	h.ok("campaign", "set", "c1", "--daily", "10units")
	h.ok("--nats", n.URL, "campaign", "pause", "c1") // unsigned
	h.ok("--nats", n.URL, "--broadcast-key-file", keyFile, "campaign", "pause", "c1")
	select {
	case e := <-events:
		if e.Kind != pacer.EventRevoked || e.Campaign != "c1" || e.Nonce == "" {
			t.Fatalf("event %+v", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the signed pause did not arrive")
	}
	sub.Flush(5 * time.Second)
	if got := sub.Stats().Rejected[broadcast.RejectUnsigned]; got != 1 {
		t.Fatalf("%d unsigned events rejected, want the one pause sent without the key", got)
	}
	if r := h.run("--nats", n.URL, "--broadcast-key-file", filepath.Join(t.TempDir(), "missing"), "campaign", "pause", "c1"); r.code != exitFailure ||
		!strings.Contains(r.stderr, "--broadcast-key-file") {
		t.Fatalf("missing key file: exit %d: %s", r.code, r.stderr)
	}
}
