package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacer/pacer/config"
	"github.com/pacer/pacer/internal/embedded"
	"github.com/pacer/pacer/internal/proctest"
	"github.com/pacer/pacer/internal/redisproc"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/internal/testcerts"
	"github.com/pacer/pacer/reconcile"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// secureEtcd starts etcd serving clients over TLS only, demanding a client
// certificate signed by a private CA, with etcd's auth on: user pacerd
// (password etcd-pw) may read and write the election's prefix only.
func secureEtcd(t *testing.T) (*embedded.Etcd, testcerts.Set) {
	t.Helper()
	certs, err := testcerts.New(t.TempDir(), "etcd", "pacerd")
	if err != nil {
		t.Fatal(err)
	}
	e, err := embedded.StartEtcdWith(t.TempDir(), embedded.EtcdOptions{CertFile: certs.ServerCert, KeyFile: certs.ServerKey,
		CAFile: certs.CA, ClientCertAuth: true, FastAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	tc, err := config.TLS{Enabled: true, CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}.Config(os.ReadFile)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint}, TLS: tc, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	steps := []func(context.Context) error{
		func(ctx context.Context) error { _, err := admin.UserAdd(ctx, "root", "root-pw"); return err },
		func(ctx context.Context) error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func(ctx context.Context) error { _, err := admin.RoleAdd(ctx, "pacer"); return err },
		func(ctx context.Context) error {
			_, err := admin.RoleGrantPermission(ctx, "pacer", reconcile.ElectionPrefix, clientv3.GetPrefixRangeEnd(reconcile.ElectionPrefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func(ctx context.Context) error { _, err := admin.UserAdd(ctx, "pacerd", "etcd-pw"); return err },
		func(ctx context.Context) error { _, err := admin.UserGrantRole(ctx, "pacerd", "pacer"); return err },
		func(ctx context.Context) error { _, err := admin.AuthEnable(ctx); return err },
	}
	// Each step takes milliseconds on an idle machine; the bound is what a
	// race-built etcd can take at a load average of 20.
	for i, step := range steps {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := step(cctx)
		cancel()
		if err != nil {
			t.Fatalf("etcd auth setup step %d: %v", i, err)
		}
	}
	return e, certs
}

// The election's client reaches an etcd with client-certificate auth and
// users through etcd_tls and etcd_auth; without the certificate, the CA or
// the password it is refused.
func TestEtcdTLSAndAuth(t *testing.T) {
	e, certs := secureEtcd(t)
	pw := secretFile(t, "etcd-pw\n")
	wrong := secretFile(t, "not-it\n")
	goodTLS := config.TLS{Enabled: true, CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}
	// A put that must succeed may take what a loaded machine needs; one
	// that must fail waits out its timeout when the TLS handshake fails, so
	// the refusals (each fails either way) keep a short one.
	timeout := time.Minute
	put := func(tlsCfg config.TLS, auth config.EtcdAuth, key string) error {
		cfg := config.DefaultDaemon()
		cfg.Etcd, cfg.EtcdTLS, cfg.EtcdAuth = []string{e.Endpoint}, tlsCfg, auth
		c, err := newEtcd(cfg, zap.NewNop())
		if err != nil {
			return err
		}
		defer c.Close()
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		_, err = c.Put(cctx, key, "x")
		return err
	}
	key := reconcile.ElectionPrefix + "/probe"
	// newEtcd's 5-s dial timeout also bounds the client's first
	// authentication, which a race-built etcd at a load average of 20 can
	// miss: a timeout is tried again (for up to 2 minutes), a refusal is not.
	for deadline := time.Now().Add(2 * time.Minute); ; {
		err := put(goodTLS, config.EtcdAuth{Username: "pacerd", PasswordFile: pw}, key)
		if err == nil {
			break
		}
		if !errors.Is(err, context.DeadlineExceeded) || time.Now().After(deadline) {
			t.Fatalf("client certificate and password: %v", err)
		}
		t.Logf("client certificate and password: %v; again", err)
	}
	// The refusals each wait out a dial timeout: run them together.
	timeout = 3 * time.Second
	type attempt struct {
		tls  config.TLS
		auth config.EtcdAuth
		key  string
	}
	attempts := map[string]attempt{
		"outside the election prefix": {goodTLS, config.EtcdAuth{Username: "pacerd", PasswordFile: pw}, "/other/key"},
		"wrong password":              {goodTLS, config.EtcdAuth{Username: "pacerd", PasswordFile: wrong}, key},
		"no client certificate":       {config.TLS{Enabled: true, CAFile: certs.CA}, config.EtcdAuth{Username: "pacerd", PasswordFile: pw}, key},
		"system roots":                {config.TLS{Enabled: true, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}, config.EtcdAuth{Username: "pacerd", PasswordFile: pw}, key},
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := map[string]error{}
	for name, a := range attempts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := put(a.tls, a.auth, a.key)
			mu.Lock()
			errs[name] = err
			mu.Unlock()
		}()
	}
	wg.Wait()
	for name, err := range errs {
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), "not-it") || strings.Contains(err.Error(), "etcd-pw") {
			t.Errorf("%s: the error shows a password: %v", name, err)
		}
	}
	if len(errs) != len(attempts) {
		t.Fatalf("%d results for %d attempts", len(errs), len(attempts))
	}
	cfg := config.DefaultDaemon()
	cfg.Etcd, cfg.EtcdTLS = []string{strings.Replace(e.Endpoint, "https", "http", 1)}, goodTLS
	if _, err := newEtcd(cfg, zap.NewNop()); err == nil || !strings.Contains(err.Error(), "write https://") {
		t.Errorf("http:// with etcd_tls: %v", err)
	}
}

// pacerd, configured with etcd_tls and etcd_auth, wins the election.
func TestPacerdElectedOverSecureEtcd(t *testing.T) {
	e, certs := secureEtcd(t)
	srv := redistest.StartWith(t, redisproc.Options{Persistent: true})
	dir := t.TempDir()
	pw := secretFile(t, "etcd-pw\n")
	conf := testConfig + fmt.Sprintf("etcd: [%q]\netcd_tls:\n  enabled: true\n  ca_file: %s\n  cert_file: %s\n  key_file: %s\netcd_auth:\n  username: pacerd\n  password_file: %s\n",
		e.Endpoint, certs.CA, certs.ClientCert, certs.ClientKey, pw)
	cfgPath := filepath.Join(dir, "pacerd.yaml")
	if err := os.WriteFile(cfgPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr proctest.Buffer
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- run(runCtx, []string{"--config", cfgPath, "--redis", srv.Socket, "--socket", filepath.Join(dir, "p.sock"), "--holder", "h",
			"--curves", filepath.Join(dir, "none"), "--state-dir", filepath.Join(dir, "state")}, &stdout, &stderr)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("pacerd: %v", err)
		}
	}()
	deadline := time.Now().Add(2 * time.Minute) // seconds at most when idle; a loaded machine
	for !strings.Contains(stderr.String(), "elected reconciler") {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("pacerd stopped: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("not elected within 2 minutes:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if strings.Contains(stderr.String(), "etcd-pw") {
		t.Fatalf("the password shows in the log:\n%s", stderr.String())
	}
}
