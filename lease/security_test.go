package lease_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/redisproc"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/internal/testcerts"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
)

func TestParseTarget(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string // fmt of Target, or the error's text
	}{
		{[]string{"10.0.0.1:6379"}, "{single [10.0.0.1:6379]    false}"},
		{[]string{"/run/redis.sock"}, "{unix [/run/redis.sock]    false}"},
		{[]string{"redis://10.0.0.1:6379"}, "{single [10.0.0.1:6379]    false}"},
		{[]string{"redis://10.0.0.1:6379/0"}, "{single [10.0.0.1:6379]    false}"},
		{[]string{"rediss://pacerd:s3cret@redis.internal:6380"}, "{single [redis.internal:6380]  pacerd s3cret true}"},
		{[]string{"redis://:s3cret@h:1"}, "{single [h:1]   s3cret false}"},
		{[]string{"unix:///run/redis/redis.sock"}, "{unix [/run/redis/redis.sock]    false}"},
		{[]string{"unix://u:s3cret@/run/redis/redis.sock"}, "{unix [/run/redis/redis.sock]  u s3cret false}"},
		{[]string{"rediss://u:s3cret@a:1", "rediss://u:s3cret@b:1"}, "{cluster [a:1 b:1]  u s3cret true}"},
		{[]string{"a:1", "b:1"}, "{cluster [a:1 b:1]    false}"},
		{[]string{"redis+cluster://a:7001"}, "{cluster [a:7001]    false}"},
		{[]string{"rediss+cluster://u:s3cret@a:7001", "rediss+cluster://u:s3cret@b:7001"}, "{cluster [a:7001 b:7001]  u s3cret true}"},
		{[]string{"redis+cluster://a:7001", "redis://b:7001"}, "same scheme and credentials"},
		{[]string{"redis+cluster://a:7001/1"}, `database "1"`},
		{[]string{"sentinel://m@a:1,b:1"}, "{sentinel [a:1 b:1] m   false}"},

		{nil, "at least one address is needed"},
		{[]string{"redis://h:1/2"}, `database "2"`},
		{[]string{"redis://u:s3cret@h"}, `"redis://u:xxxxx@h": "h": want host:port`},
		{[]string{"redis://u:s3cret@h:1?password=x"}, "no query"},
		{[]string{"http://h:1"}, `scheme "http"`},
		{[]string{"unix://host/path"}, "three slashes"},
		{[]string{"rediss://u:s3cret@a:1", "redis://u:s3cret@b:1"}, `"redis://u:xxxxx@b:1": every Cluster seed must use the same scheme and credentials`},
		{[]string{"redis://u:s3cret@a:1", "redis://u:other@b:1"}, "same scheme and credentials"},
		{[]string{"a:1", "a:1"}, "listed twice"},
		{[]string{"unix:///x", "a:1"}, "must be the only address"},
	} {
		got, err := lease.ParseTarget(tc.in)
		s := fmt.Sprint(got)
		if err != nil {
			s = err.Error()
			if strings.Contains(s, "s3cret") {
				t.Errorf("%q: the error shows the password: %s", tc.in, s)
			}
		}
		if !strings.Contains(s, tc.want) {
			t.Errorf("%q: got %s, want %s", tc.in, s, tc.want)
		}
	}
	if got := lease.Redact("rediss://u:s3cret@h:1"); got != "rediss://u:xxxxx@h:1" {
		t.Errorf("Redact = %q", got)
	}
	if got := lease.Redact("10.0.0.1:6379"); got != "10.0.0.1:6379" {
		t.Errorf("Redact = %q", got)
	}
}

// aclConf is a Redis ACL: the ledger's user, and a default user with a
// password (requirepass).
const aclConf = "user pacerd on >ledger-pw ~* &* +@all\nuser default on >default-pw ~* &* +@all\n"

// TestRedisACL runs redis-server with an ACL user and a password on the
// default user, and connects as the daemon would: by ClientOptions, by a
// redis:// and a unix:// URL; wrong or missing credentials give an error
// IsAuthError recognises, without the password in it.
func TestRedisACL(t *testing.T) {
	srv := redistest.StartWith(t, redisproc.Options{TCP: true, Conf: aclConf})
	ping := func(addrs []string, opt lease.ClientOptions) error {
		rdb, err := lease.NewClientWith(addrs, opt)
		if err != nil {
			return err
		}
		defer rdb.Close()
		// A real ledger call: the durability check reads CONFIG and INFO.
		_, err = lease.CheckDurability(ctx, rdb, lease.Durability{Policy: lease.PolicyNone}, nil)
		if err != nil {
			return err
		}
		return rdb.Eval(ctx, "return redis.call('INCR', KEYS[1])", []string{"k"}).Err()
	}
	for name, tc := range map[string]struct {
		addrs []string
		opt   lease.ClientOptions
	}{
		"acl user":          {[]string{srv.Addr}, lease.ClientOptions{Username: "pacerd", Password: "ledger-pw"}},
		"requirepass":       {[]string{srv.Addr}, lease.ClientOptions{Password: "default-pw"}},
		"redis url":         {[]string{"redis://pacerd:ledger-pw@" + srv.Addr}, lease.ClientOptions{}},
		"redis url default": {[]string{"redis://:default-pw@" + srv.Addr}, lease.ClientOptions{}},
		"unix url":          {[]string{"unix://pacerd:ledger-pw@" + srv.Socket}, lease.ClientOptions{}},
		"unix path":         {[]string{srv.Socket}, lease.ClientOptions{Username: "pacerd", Password: "ledger-pw"}},
	} {
		if err := ping(tc.addrs, tc.opt); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, tc := range map[string]struct {
		addrs []string
		opt   lease.ClientOptions
	}{
		"no password":    {[]string{srv.Addr}, lease.ClientOptions{}},
		"wrong password": {[]string{srv.Addr}, lease.ClientOptions{Username: "pacerd", Password: "not-the-pw"}},
		"wrong user":     {[]string{"redis://nobody:not-the-pw@" + srv.Addr}, lease.ClientOptions{}},
	} {
		err := ping(tc.addrs, tc.opt)
		if err == nil || !lease.IsAuthError(err) || !errors.Is(lease.CheckAuth(err), lease.ErrAuth) {
			t.Errorf("%s: %v, want an authentication error", name, err)
			continue
		}
		if strings.Contains(err.Error(), "not-the-pw") {
			t.Errorf("%s: the error shows the password: %v", name, err)
		}
	}
	if _, err := lease.NewClientWith([]string{"redis://u:p@" + srv.Addr}, lease.ClientOptions{Password: "q"}); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("credentials in the URL and the options: %v", err)
	}
	// A Redis that is merely down is not an authentication error: pacerd
	// waits for it rather than refusing to start.
	down := ping([]string{"127.0.0.1:1"}, lease.ClientOptions{Password: "x", DialTimeout: time.Second})
	if down == nil || lease.IsAuthError(down) {
		t.Errorf("a closed port: %v; want an error that is not an authentication error", down)
	}
}

func tlsConfig(t *testing.T, certs testcerts.Set, client bool) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	c := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if client {
		cert, err := tls.LoadX509KeyPair(certs.ClientCert, certs.ClientKey)
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c
}

// TestRedisTLS runs redis-server with TLS only (no plain TCP port), client
// certificates required and an ACL user: the client with the private CA,
// its certificate and the password gets in; without the certificate, the
// CA or the right server name, it gets an authentication error.
func TestRedisTLS(t *testing.T) {
	certs, err := testcerts.New(t.TempDir(), "redis", "pacerd")
	if err != nil {
		t.Fatal(err)
	}
	srv := redistest.StartWith(t, redisproc.Options{Conf: aclConf,
		TLS: &redisproc.TLS{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, CAFile: certs.CA, ClientCerts: true}})
	try := func(addr string, opt lease.ClientOptions) error {
		opt.DialTimeout = 5 * time.Second
		rdb, err := lease.NewClientWith([]string{addr}, opt)
		if err != nil {
			return err
		}
		defer rdb.Close()
		return rdb.Eval(ctx, "return redis.call('INCR', KEYS[1])", []string{"k"}).Err()
	}
	good := lease.ClientOptions{Username: "pacerd", Password: "ledger-pw", TLS: tlsConfig(t, certs, true)}
	if err := try(srv.Addr, good); err != nil {
		t.Fatalf("TLS with the CA, a client certificate and the ACL user: %v", err)
	}
	if err := try("rediss://pacerd:ledger-pw@"+srv.Addr, lease.ClientOptions{TLS: tlsConfig(t, certs, true)}); err != nil {
		t.Fatalf("rediss:// URL: %v", err)
	}
	named := good
	named.TLS = tlsConfig(t, certs, true)
	named.TLS.ServerName = "localhost"
	if err := try(srv.Addr, named); err != nil {
		t.Fatalf("server_name localhost: %v", err)
	}

	noCert := good
	noCert.TLS = tlsConfig(t, certs, false)
	wrongName := good
	wrongName.TLS = tlsConfig(t, certs, true)
	wrongName.TLS.ServerName = "redis.elsewhere"
	for name, tc := range map[string]struct {
		addr string
		opt  lease.ClientOptions
	}{
		"no client certificate": {srv.Addr, noCert},
		"system roots":          {"rediss://pacerd:ledger-pw@" + srv.Addr, lease.ClientOptions{}},
		"wrong server name":     {srv.Addr, wrongName},
		"plain TCP to TLS port": {srv.Addr, lease.ClientOptions{Username: "pacerd", Password: "ledger-pw"}},
		"TLS, wrong password":   {srv.Addr, lease.ClientOptions{Username: "pacerd", Password: "nope", TLS: tlsConfig(t, certs, true)}},
	} {
		err := try(tc.addr, tc.opt)
		if err == nil {
			t.Errorf("%s: connected", name)
			continue
		}
		// A refused client certificate shows, under TLS 1.3, as a reset
		// after the handshake: indistinguishable from a network fault, so
		// pacerd stays not ready (and says why) instead of refusing to start.
		if name != "plain TCP to TLS port" && name != "no client certificate" && !lease.IsAuthError(err) {
			t.Errorf("%s: %v is not recognised as an authentication or TLS error", name, err)
		}
	}
	if _, err := lease.NewClientWith([]string{srv.Socket}, good); err == nil || !strings.Contains(err.Error(), "Unix socket") {
		t.Errorf("TLS on a Unix socket: %v", err)
	}
}

// TestRedisClusterTLSAndACL runs a two-master Cluster with TLS on the client
// and bus ports and an ACL user; the default user may only run CLUSTER and
// PING (what startCluster needs on the plain sockets). The ledger's client
// reaches both masters with the same options.
func TestRedisClusterTLSAndACL(t *testing.T) {
	certs, err := testcerts.New(t.TempDir(), "cluster", "pacerd")
	if err != nil {
		t.Fatal(err)
	}
	opt := func() redisproc.Options {
		return redisproc.Options{
			Conf:  "user pacerd on >ledger-pw ~* &* +@all\nuser default on nopass &* +cluster +ping\n",
			TLS:   &redisproc.TLS{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, CAFile: certs.CA, ClientCerts: true},
			Extra: []string{"--tls-cluster", "yes", "--tls-replication", "yes"},
		}
	}
	nodes := startCluster(t, opt(), opt())
	addrs := []string{nodes[0].Addr, nodes[1].Addr}
	rdb, err := lease.NewClientWith(addrs, lease.ClientOptions{Username: "pacerd", Password: "ledger-pw", TLS: tlsConfig(t, certs, true)})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	// Keys on both masters' slots.
	for _, k := range []string{"budget:{a}:0", "budget:{b}:0", "budget:{c}:0", "budget:{d}:0"} {
		if err := rdb.Eval(ctx, "return redis.call('INCR', KEYS[1])", []string{k}).Err(); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
	}
	var masters atomic.Int32
	err = rdb.(*redis.ClusterClient).ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		n, err := m.DBSize(ctx).Result()
		if n > 0 {
			masters.Add(1)
		}
		return err
	})
	if err != nil || masters.Load() != 2 {
		t.Fatalf("keys on %d masters (%v), want both", masters.Load(), err)
	}

	anon, err := lease.NewClientWith(addrs, lease.ClientOptions{TLS: tlsConfig(t, certs, true)})
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	err = anon.Eval(ctx, "return redis.call('INCR', KEYS[1])", []string{"budget:{a}:0"}).Err()
	if err == nil || !lease.IsAuthError(err) {
		t.Fatalf("the default user ran a script: %v", err)
	}
}

// TestSentinelAuth runs a master with a password and a Sentinel with its
// own: the client needs both.
func TestSentinelAuth(t *testing.T) {
	master := redistest.StartWith(t, redisproc.Options{TCP: true, Conf: aclConf})
	host, port, _ := strings.Cut(master.Addr, ":")
	sentinel := redistest.StartWith(t, redisproc.Options{Sentinel: true, Conf: fmt.Sprintf(
		"sentinel monitor ledger %s %s 1\nsentinel auth-user ledger pacerd\nsentinel auth-pass ledger ledger-pw\nrequirepass sentinel-pw\n", host, port)})
	addr := []string{"sentinel://ledger@" + sentinel.Addr}
	try := func(opt lease.ClientOptions) error {
		rdb, err := lease.NewClientWith(addr, opt)
		if err != nil {
			return err
		}
		defer rdb.Close()
		return rdb.Eval(ctx, "return redis.call('INCR', KEYS[1])", []string{"k"}).Err()
	}
	if err := try(lease.ClientOptions{Username: "pacerd", Password: "ledger-pw", SentinelPassword: "sentinel-pw"}); err != nil {
		t.Fatalf("both passwords: %v", err)
	}
	if err := try(lease.ClientOptions{Username: "pacerd", Password: "ledger-pw"}); err == nil {
		t.Error("no Sentinel password: connected")
	}
	if err := try(lease.ClientOptions{Username: "pacerd", Password: "wrong", SentinelPassword: "sentinel-pw"}); err == nil || !lease.IsAuthError(err) {
		t.Errorf("wrong master password: %v, want an authentication error", err)
	}
}

// TestSentinelTLS runs a TLS-only master and a TLS-only Sentinel that
// reaches the master over TLS (tls-replication yes), with passwords on
// both: one ClientOptions (CA, client certificate, both passwords) serves
// the Sentinel and the master it names.
func TestSentinelTLS(t *testing.T) {
	certs, err := testcerts.New(t.TempDir(), "sentinel", "pacerd")
	if err != nil {
		t.Fatal(err)
	}
	serverTLS := &redisproc.TLS{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, CAFile: certs.CA, ClientCerts: true}
	master := redistest.StartWith(t, redisproc.Options{Conf: aclConf, TLS: serverTLS})
	host, port, _ := strings.Cut(master.Addr, ":")
	sentinel := redistest.StartWith(t, redisproc.Options{Sentinel: true, TLS: serverTLS, Conf: fmt.Sprintf(
		"tls-replication yes\nsentinel monitor ledger %s %s 1\nsentinel auth-user ledger pacerd\nsentinel auth-pass ledger ledger-pw\nrequirepass sentinel-pw\n", host, port)})
	rdb, err := lease.NewClientWith([]string{"sentinel://ledger@" + sentinel.Addr}, lease.ClientOptions{
		Username: "pacerd", Password: "ledger-pw", SentinelPassword: "sentinel-pw", TLS: tlsConfig(t, certs, true), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	if err := rdb.Eval(ctx, "return redis.call('INCR', KEYS[1])", []string{"k"}).Err(); err != nil {
		t.Fatalf("through a TLS Sentinel to a TLS master: %v", err)
	}
	plain, err := lease.NewClientWith([]string{"sentinel://ledger@" + sentinel.Addr}, lease.ClientOptions{
		Username: "pacerd", Password: "ledger-pw", SentinelPassword: "sentinel-pw", DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Fatal("a plain-TCP client reached the TLS Sentinel")
	}
}
