package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/config"
	"github.com/pacer/pacer/internal/proctest"
	"github.com/pacer/pacer/internal/redisproc"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/reconcile"
	"go.uber.org/zap"
)

// The elected pacerd advances the ledger's watermark every pass and records
// it in etcd, with the etcd role docs/SECURITY.md documents (read/write on the
// election's prefix, /pacer/reconciler, and nothing else).
func TestPacerdRecordsTheWatermarkInEtcd(t *testing.T) {
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
	cfg := config.DefaultDaemon()
	cfg.Etcd = []string{e.Endpoint}
	cfg.EtcdTLS = config.TLS{Enabled: true, CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}
	cfg.EtcdAuth = config.EtcdAuth{Username: "pacerd", PasswordFile: pw}
	cli, err := newEtcd(cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	deadline := time.Now().Add(2 * time.Minute) // seconds when idle; a machine at a load average of 20 takes longer
	for {
		var w lease.Watermark
		resp, err := cli.Get(ctx, reconcile.WatermarkPrefix+"redis")
		if err == nil && len(resp.Kvs) == 1 && json.Unmarshal(resp.Kvs[0].Value, &w) == nil && w.Counter >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no watermark past 2 recorded in etcd within 2 minutes (%v, %v):\n%s", resp, err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if s := stderr.String(); strings.Contains(s, "watermark check failed") || strings.Contains(s, "lost acknowledged writes") {
		t.Fatalf("the watermark failed or cried wolf:\n%s", s)
	}
}
