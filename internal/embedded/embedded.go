// Package embedded runs a real etcd and a real NATS server inside the current
// process, on loopback ports chosen by the kernel, for tests and for the
// development stack (cmd/pacer-dev). Production pacerd never links it: it
// talks to the fleet's etcd and NATS.
package embedded

import (
	"fmt"
	"net"
	"net/url"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Etcd is a single-member etcd server.
type Etcd struct {
	e    *embed.Etcd
	dir  string
	peer string
	opt  EtcdOptions
	// Endpoint is the client URL, e.g. http://127.0.0.1:41234, or
	// https://… with EtcdOptions.CertFile.
	Endpoint string
}

// EtcdOptions secure the client listener. The zero value is plain HTTP.
type EtcdOptions struct {
	// CertFile and KeyFile make clients connect with TLS (https://).
	CertFile, KeyFile string
	// CAFile verifies client certificates; ClientCertAuth demands one
	// (etcd --client-cert-auth).
	CAFile         string
	ClientCertAuth bool
	// FastAuth hashes etcd users' passwords at bcrypt's minimum cost:
	// etcd's default cost takes seconds per UserAdd and per authentication
	// in a race-built test at a high load average. Tests only.
	FastAuth bool
}

// StartEtcd starts etcd with its data in dir and returns once it serves.
// Timings are short (10 ms ticks, 100 ms elections) so tests start in ~0.1 s.
func StartEtcd(dir string) (*Etcd, error) {
	return StartEtcdWith(dir, EtcdOptions{})
}

// StartEtcdWith is StartEtcd with a secured client listener.
func StartEtcdWith(dir string, opt EtcdOptions) (*Etcd, error) {
	scheme := "http"
	if opt.CertFile != "" {
		scheme = "https"
	}
	e := &Etcd{dir: dir, Endpoint: scheme + "://127.0.0.1:0", peer: "http://127.0.0.1:0", opt: opt}
	return e, e.Start()
}

// StartEtcdOn is StartEtcd on fixed loopback ports (0: one the kernel
// picks), for the dev stack, whose printed commands should not change from
// one run to the next.
func StartEtcdOn(dir string, clientPort, peerPort int) (*Etcd, error) {
	e := &Etcd{dir: dir, Endpoint: fmt.Sprintf("http://127.0.0.1:%d", clientPort), peer: fmt.Sprintf("http://127.0.0.1:%d", peerPort)}
	return e, e.Start()
}

// Start (re)starts etcd on the same data and, after the first start, the
// same URLs, so clients reconnect after an outage.
func (e *Etcd) Start() error {
	cfg := embed.NewConfig()
	cfg.Dir = e.dir
	cfg.Name = "pacer-dev"
	cfg.TickMs, cfg.ElectionMs = 10, 100
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.UnsafeNoFsync = true // test and dev data only
	if e.opt.FastAuth {
		cfg.BcryptCost = 4 // golang.org/x/crypto/bcrypt.MinCost
	}
	if e.opt.CertFile != "" {
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: e.opt.CertFile, KeyFile: e.opt.KeyFile,
			TrustedCAFile: e.opt.CAFile, ClientCertAuth: e.opt.ClientCertAuth}
	}
	client, err := url.Parse(e.Endpoint)
	if err != nil {
		return err
	}
	peer, err := url.Parse(e.peer)
	if err != nil {
		return err
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	ee, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	select {
	case <-ee.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		ee.Close()
		return fmt.Errorf("etcd did not become ready within 30s")
	}
	e.e = ee
	e.Endpoint = client.Scheme + "://" + ee.Clients[0].Addr().String()
	e.peer = "http://" + ee.Peers[0].Listener.Addr().String()
	return nil
}

// Close stops etcd; closing a stopped server does nothing.
func (e *Etcd) Close() {
	if e.e != nil {
		e.e.Close()
		e.e = nil
	}
}

// NATS is a NATS server.
type NATS struct {
	s *natsserver.Server
	// URL is the client URL, e.g. nats://127.0.0.1:41235.
	URL       string
	port      int
	configure func(*natsserver.Options)
}

// StartNATS starts a NATS server on a free loopback port.
func StartNATS() (*NATS, error) {
	return StartNATSWith(nil)
}

// StartNATSWith starts a NATS server on a free loopback port, with options
// set by configure (users, nkeys, permissions, TLS) on every start.
func StartNATSWith(configure func(*natsserver.Options)) (*NATS, error) {
	n := &NATS{port: -1, configure: configure}
	if err := n.Start(); err != nil {
		return nil, err
	}
	return n, nil
}

// StartNATSOn starts a NATS server on a fixed loopback port (0: one the
// kernel picks).
func StartNATSOn(port int) (*NATS, error) {
	if port == 0 {
		port = -1 // nats-server's "any port"; its 0 means 4222
	}
	n := &NATS{port: port}
	if err := n.Start(); err != nil {
		return nil, err
	}
	return n, nil
}

// Start (re)starts the server, on the port it had before if it ran already,
// so clients reconnect to the same URL after an outage.
func (n *NATS) Start() error {
	opts := &natsserver.Options{Host: "127.0.0.1", Port: n.port, NoLog: true, NoSigs: true}
	if n.configure != nil {
		n.configure(opts)
	}
	s, err := natsserver.NewServer(opts)
	if err != nil {
		return fmt.Errorf("start nats: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return fmt.Errorf("nats did not become ready within 10s")
	}
	n.s, n.URL = s, s.ClientURL()
	n.port = s.Addr().(*net.TCPAddr).Port
	return nil
}

// Close stops the server.
func (n *NATS) Close() {
	n.s.Shutdown()
	n.s.WaitForShutdown()
}
