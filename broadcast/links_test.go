package broadcast_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	"github.com/pacer/pacer"
	"github.com/pacer/pacer/broadcast"
	"github.com/pacer/pacer/config"
	"github.com/pacer/pacer/internal/embedded"
	"github.com/pacer/pacer/internal/testcerts"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// daemonPermissions and operatorPermissions are the NATS permissions the
// docs/SECURITY.md documents: daemons hear everything and may
// publish only what the ledger told them; only operators revoke or change.
var (
	daemonPermissions = &natsserver.Permissions{
		Publish:   &natsserver.SubjectPermission{Allow: []string{"pacer.exhausted.>", "pacer.lost-writes.>"}},
		Subscribe: &natsserver.SubjectPermission{Allow: []string{"pacer.>"}},
	}
	operatorPermissions = &natsserver.Permissions{
		Publish:   &natsserver.SubjectPermission{Allow: []string{"pacer.>"}},
		Subscribe: &natsserver.SubjectPermission{Allow: []string{"_INBOX.>"}},
	}
)

// secureNATS runs nats-server with TLS (a private CA), a daemon user with a
// password and an operator nkey, with the permissions above.
func secureNATS(t *testing.T) (n *embedded.NATS, certs testcerts.Set, operatorSeed string) {
	t.Helper()
	certs, err := testcerts.New(t.TempDir(), "nats", "pacerd")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	tc, err := natsserver.GenTLSConfig(&natsserver.TLSConfigOpts{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, CaFile: certs.CA})
	if err != nil {
		t.Fatal(err)
	}
	n, err = embedded.StartNATSWith(func(o *natsserver.Options) {
		o.TLSConfig, o.TLS = tc, true
		o.Users = []*natsserver.User{{Username: "pacerd", Password: "daemon-pw", Permissions: daemonPermissions}}
		o.Nkeys = []*natsserver.NkeyUser{{Nkey: pub, Permissions: operatorPermissions}}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n, certs, string(seed)
}

func caConfig(t *testing.T, certs testcerts.Set) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// Over TLS with a private CA: a daemon (user and password) hears the
// operator's (nkey) revoked event and its own exhausted event; the server
// refuses the daemon's attempt to publish revoked, so no subscriber sees it.
func TestNATSPermissionsAndTLS(t *testing.T) {
	n, certs, opSeed := secureNATS(t)
	daemon, err := broadcast.ConnectWith(n.URL, broadcast.Options{Name: "pacerd", Username: "pacerd", Password: "daemon-pw", TLS: caConfig(t, certs)})
	if err != nil {
		t.Fatal(err)
	}
	defer daemon.Close()
	op, err := broadcast.ConnectWith(n.URL, broadcast.Options{Name: "pacerctl", NkeySeed: opSeed, TLS: caConfig(t, certs)})
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	got := make(chan pacer.Event, 10)
	if err := daemon.Subscribe(func(e pacer.Event) { got <- e }); err != nil {
		t.Fatal(err)
	}
	if err := daemon.Flush(5 * time.Second); err != nil {
		t.Fatal(err)
	}

	forged := pacer.Event{Kind: pacer.EventRevoked, Campaign: "c1", From: "daemon"}
	if err := daemon.Publish(forged); err != nil {
		t.Fatal(err)
	}
	daemon.Flush(5 * time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for daemon.Stats().Refused == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the server did not refuse the daemon's revoked event")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, e := range []pacer.Event{
		{Kind: pacer.EventRevoked, Campaign: "c1", From: "operator"},
	} {
		if err := op.Publish(e); err != nil {
			t.Fatal(err)
		}
		op.Flush(5 * time.Second)
	}
	if err := daemon.Publish(pacer.Event{Kind: pacer.EventExhausted, Campaign: "c1", Day: "2026-11-23", From: "daemon"}); err != nil {
		t.Fatal(err)
	}
	daemon.Flush(5 * time.Second)
	var from []string
	for len(from) < 2 {
		select {
		case e := <-got:
			from = append(from, e.Kind+" from "+e.From)
		case <-time.After(5 * time.Second):
			t.Fatalf("received %v; want the operator's revoked and the daemon's exhausted", from)
		}
	}
	select {
	case e := <-got:
		from = append(from, e.Kind+" from "+e.From)
	case <-time.After(100 * time.Millisecond):
	}
	if strings.Join(from, ", ") != "revoked from operator, exhausted from daemon" {
		t.Fatalf("received %v; want only the operator's revoked and the daemon's exhausted", from)
	}
	if s := op.Stats(); s.Refused != 0 {
		t.Errorf("operator refused %d times", s.Refused)
	}
}

// Wrong credentials or no private CA: the client never connects and says
// why in its log, each attempt, with the URL's password never shown.
func TestNATSRefusedAndRedacted(t *testing.T) {
	n, certs, _ := secureNATS(t)
	port := n.URL[strings.LastIndex(n.URL, ":")+1:]
	for name, tc := range map[string]struct {
		url  string
		opt  broadcast.Options
		want string
	}{
		"wrong password": {"nats://pacerd:wrong-pw@127.0.0.1:" + port, broadcast.Options{TLS: caConfig(t, certs)}, "Authorization Violation"},
		"system roots":   {"tls://pacerd:daemon-pw@127.0.0.1:" + port, broadcast.Options{}, "certificate"},
		"no TLS":         {n.URL, broadcast.Options{Username: "pacerd", Password: "daemon-pw"}, "TLS"},
	} {
		core, logs := observer.New(zap.DebugLevel)
		tc.opt.Logger = zap.New(core)
		b, err := broadcast.ConnectWith(tc.url, tc.opt)
		if err != nil {
			// Connect retries in the background; an error here is only for
			// what can never work.
			if strings.Contains(err.Error(), "-pw") || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(tc.want)) {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		deadline := time.Now().Add(5 * time.Second)
		for logs.FilterMessage("NATS connection attempt failed; retrying").Len() == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		connected := b.Stats().Connected
		b.Close()
		if connected {
			t.Errorf("%s: connected", name)
		}
		all := ""
		for _, e := range logs.All() {
			// Every field, not only "error": some entries (closing,
			// disconnects) carry none, and a password must not hide in any.
			all += fmt.Sprintf("%s %v\n", e.Message, e.ContextMap())
		}
		if !strings.Contains(strings.ToLower(all), strings.ToLower(tc.want)) {
			t.Errorf("%s: log does not say %q:\n%s", name, tc.want, all)
		}
		if strings.Contains(all, "-pw") {
			t.Errorf("%s: the log shows the password:\n%s", name, all)
		}
	}

	// A password in the URL is never logged, also not when reconnecting.
	core, logs := observer.New(zap.DebugLevel)
	url := "tls://pacerd:daemon-pw@127.0.0.1:" + port
	b, err := broadcast.ConnectWith(url, broadcast.Options{TLS: caConfig(t, certs), Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Flush(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	n.Close()
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for logs.FilterMessage("NATS reconnected").Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no reconnect within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, e := range logs.All() {
		line := e.Message
		for k, v := range e.ContextMap() {
			line += " " + k + "=" + toString(v)
		}
		if strings.Contains(line, "daemon-pw") {
			t.Errorf("log line shows the password: %s", line)
		}
		if e.Message == "NATS reconnected" && !strings.Contains(line, "127.0.0.1:"+port) {
			t.Errorf("reconnect line without the (redacted) URL: %s", line)
		}
	}
	if got := broadcast.RedactURLs("nats://u:p@h:1, tls://tok@h:2,nats://h:3"); got != "nats://xxxxx@h:1,tls://xxxxx@h:2,nats://h:3" {
		t.Errorf("RedactURLs = %q", got)
	}
}

func toString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return ""
}

// A .creds file (user JWT and seed) against a server in operator mode, read
// as pacerd reads nats_auth.creds_file; the user's JWT permissions apply.
func TestNATSCredsFile(t *testing.T) {
	okp, _ := nkeys.CreateOperator()
	opub, _ := okp.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	ojwt, err := oc.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	operator, err := jwt.DecodeOperatorClaims(ojwt)
	if err != nil {
		t.Fatal(err)
	}
	akp, _ := nkeys.CreateAccount()
	apub, _ := akp.PublicKey()
	ajwt, err := jwt.NewAccountClaims(apub).Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	user := func(pub ...string) string {
		ukp, _ := nkeys.CreateUser()
		upub, _ := ukp.PublicKey()
		uc := jwt.NewUserClaims(upub)
		uc.Pub.Allow.Add(pub...)
		uc.Sub.Allow.Add("pacer.>", "_INBOX.>")
		ujwt, err := uc.Encode(akp)
		if err != nil {
			t.Fatal(err)
		}
		seed, _ := ukp.Seed()
		creds, err := jwt.FormatUserConfig(ujwt, seed)
		if err != nil {
			t.Fatal(err)
		}
		p := t.TempDir() + "/user.creds"
		if err := os.WriteFile(p, creds, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	resolver := &natsserver.MemAccResolver{}
	if err := resolver.Store(apub, ajwt); err != nil {
		t.Fatal(err)
	}
	n, err := embedded.StartNATSWith(func(o *natsserver.Options) {
		o.TrustedOperators = []*jwt.OperatorClaims{operator}
		o.AccountResolver = resolver
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()

	connect := func(credsFile string) *broadcast.Broadcaster {
		opt, err := config.NATSClientOptions(config.NATSAuth{CredsFile: credsFile}, config.TLS{}, config.Secrets{ReadFile: os.ReadFile})
		if err != nil {
			t.Fatal(err)
		}
		b, err := broadcast.ConnectWith(n.URL, opt)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		if err := b.Flush(5 * time.Second); err != nil {
			t.Fatalf("creds %s: %v", credsFile, err)
		}
		return b
	}
	daemon := connect(user("pacer.exhausted.>"))
	op := connect(user("pacer.>"))
	got := make(chan pacer.Event, 10)
	if err := daemon.Subscribe(func(e pacer.Event) { got <- e }); err != nil {
		t.Fatal(err)
	}
	daemon.Flush(5 * time.Second)
	daemon.Publish(pacer.Event{Kind: pacer.EventRevoked, Campaign: "c", From: "daemon"})
	daemon.Flush(5 * time.Second)
	op.Publish(pacer.Event{Kind: pacer.EventChanged, Campaign: "c", From: "operator"})
	op.Flush(5 * time.Second)
	select {
	case e := <-got:
		if e.From != "operator" {
			t.Fatalf("first event %+v; the daemon's revoked should have been refused", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the operator's event did not arrive")
	}
	if _, _, err := broadcast.ParseCreds([]byte("not a creds file")); err == nil {
		t.Error("ParseCreds accepted garbage")
	}
}
