package main

import (
	"fmt"
	"os"
	"time"

	"github.com/pacer/pacer/broadcast"
	"github.com/pacer/pacer/config"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// newEtcd returns the election's etcd client, with etcd_auth and etcd_tls.
// It dials lazily and retries: etcd being down only pauses the reconciler;
// leases keep working.
func newEtcd(cfg config.Daemon, log *zap.Logger) (*clientv3.Client, error) {
	eopt, err := config.EtcdClientOptions(cfg.Etcd, cfg.EtcdAuth, cfg.EtcdTLS, secrets)
	if err != nil {
		return nil, err
	}
	if eopt.Password != "" && eopt.TLS == nil {
		log.Warn("etcd password sent without TLS: anyone on the path can read it; use https:// endpoints and etcd_tls")
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: cfg.Etcd, DialTimeout: 5 * time.Second,
		Username: eopt.Username, Password: eopt.Password, TLS: eopt.TLS,
		Logger: log.Named("etcd").WithOptions(zap.IncreaseLevel(zap.ErrorLevel))})
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	return c, nil
}

// broadcastKeys reads broadcast.key_file; nil without one.
func broadcastKeys(cfg config.Daemon) ([][]byte, error) {
	if cfg.Broadcast.KeyFile == "" {
		return nil, nil
	}
	b, err := os.ReadFile(cfg.Broadcast.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("broadcast.key_file: %w", err)
	}
	keys, err := broadcast.ParseKeys(b)
	if err != nil {
		return nil, fmt.Errorf("broadcast.key_file %s: %w", cfg.Broadcast.KeyFile, err)
	}
	return keys, nil
}
