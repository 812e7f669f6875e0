package broadcast_test

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/pacer/pacer"
	"github.com/pacer/pacer/broadcast"
	"github.com/pacer/pacer/internal/clocktest"
	"github.com/pacer/pacer/internal/embedded"
)

var (
	key1 = []byte("0123456789abcdef0123456789abcdef-key-one")
	key2 = []byte("fedcba9876543210fedcba9876543210-key-two")
)

func TestParseKeys(t *testing.T) {
	keys, err := broadcast.ParseKeys([]byte("# fleet key\n" + string(key1) + "\r\n\n" + string(key2) + "  \n"))
	if err != nil || len(keys) != 2 || string(keys[0]) != string(key1) || string(keys[1]) != string(key2) {
		t.Fatalf("ParseKeys = %q, %v", keys, err)
	}
	for in, want := range map[string]string{
		"":                   "no key",
		"# only\n":           "no key",
		"short\n":            "line 1: key of 5 bytes; at least 32 needed",
		string(key1) + "\nx": "line 2: key of 1 bytes",
	} {
		if _, err := broadcast.ParseKeys([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseKeys(%q) = %v, want %q", in, err, want)
		}
	}
}

// A receiver with the fleet's key acts on signed events only: unsigned,
// forged (wrong key, tampered payload, signature moved to another
// subject), replayed and stale events are ignored and counted, on a real
// NATS server.
func TestSignedBroadcasts(t *testing.T) {
	n, err := embedded.StartNATS()
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	clk := clocktest.At(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	opt := func(keys ...[]byte) broadcast.Options {
		return broadcast.Options{Keys: keys, MaxAge: 10 * time.Second, Now: clk.Now}
	}
	pub, err := broadcast.ConnectWith(n.URL, opt(key1))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	// The receiver is mid-rotation: it verifies with key2 or key1.
	sub, err := broadcast.ConnectWith(n.URL, opt(key2, key1))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var mu sync.Mutex
	var got []string
	if err := sub.Subscribe(func(e pacer.Event) { mu.Lock(); got = append(got, e.From); mu.Unlock() }); err != nil {
		t.Fatal(err)
	}
	sub.Flush(5 * time.Second)
	// A raw client sees what goes over the wire, and sends what it likes.
	raw, err := nats.Connect(n.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	wire, err := raw.SubscribeSync("pacer.>")
	if err != nil {
		t.Fatal(err)
	}
	raw.Flush()

	if err := pub.Publish(pacer.Event{Kind: pacer.EventRevoked, Campaign: "c1", From: "operator"}); err != nil {
		t.Fatal(err)
	}
	pub.Flush(5 * time.Second)
	signed, err := wire.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if signed.Header.Get(broadcast.SignatureHeader) == "" || !strings.Contains(string(signed.Data), `"nonce":"`) {
		t.Fatalf("published message not signed: %s %v", signed.Data, signed.Header)
	}
	sig := signed.Header.Get(broadcast.SignatureHeader)
	send := func(subject string, data []byte, sig string) {
		m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
		if sig != "" {
			m.Header.Set(broadcast.SignatureHeader, sig)
		}
		if err := raw.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	// Unsigned.
	send("pacer.revoked.c1", []byte(`{"kind":"revoked","campaign":"c1","from":"unsigned","at_ms":`+strconv.FormatInt(clk.Now().UnixMilli(), 10)+`}`), "")
	// Signed with a key the receiver does not hold.
	mallory, err := broadcast.ConnectWith(n.URL, opt([]byte("mallory's key, 32 bytes or more.....")))
	if err != nil {
		t.Fatal(err)
	}
	defer mallory.Close()
	mallory.Publish(pacer.Event{Kind: pacer.EventRevoked, Campaign: "c1", From: "mallory"})
	mallory.Flush(5 * time.Second)
	// Tampered: the operator's signature on another campaign's payload, and
	// on another subject.
	send("pacer.revoked.c1", []byte(strings.Replace(string(signed.Data), `"from":"operator"`, `"from":"tampered"`, 1)), sig)
	send("pacer.changed.c1", []byte(strings.Replace(string(signed.Data), `"revoked"`, `"changed"`, 1)), sig)
	send("pacer.revoked.c1", signed.Data, "v1=not base64")
	// Replayed: the operator's message, byte for byte.
	send("pacer.revoked.c1", signed.Data, sig)
	raw.Flush()
	// Everything so far is handled before the receiver's clock moves.
	handled := func() int64 {
		s := sub.Stats()
		n := s.Received
		for _, r := range s.Rejected {
			n += r
		}
		return n
	}
	for deadline := time.Now().Add(30 * time.Second); handled() < 7; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 7 events handled within 30s: %+v", handled(), sub.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Stale: the same message replayed to a receiver whose clock is past
	// max_age, and a fresh one from a sender whose clock is far behind.
	clk.Add(11 * time.Second)
	send("pacer.revoked.c1", signed.Data, sig)
	raw.Flush() // on its own connection: the barrier below does not order it
	late := pacer.Event{Kind: pacer.EventChanged, Campaign: "c1", From: "late", AtMillis: clk.Now().Add(-time.Minute).UnixMilli()}
	pub.Publish(late)
	early := pacer.Event{Kind: pacer.EventChanged, Campaign: "c1", From: "early", AtMillis: clk.Now().Add(time.Minute).UnixMilli()}
	pub.Publish(early)
	// And the barrier: a good event after all of them.
	pub.Publish(pacer.Event{Kind: pacer.EventChanged, Campaign: "c1", From: "operator-again"})
	pub.Flush(5 * time.Second)

	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 2 && handled() >= 11 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	sub.Flush(5 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(got, ",") != "operator,operator-again" {
		t.Fatalf("acted on %v; want only operator,operator-again", got)
	}
	want := map[string]int64{broadcast.RejectUnsigned: 1, broadcast.RejectForged: 4, broadcast.RejectReplayed: 1, broadcast.RejectStale: 3, broadcast.RejectFull: 0}
	s := sub.Stats()
	for r, w := range want {
		if s.Rejected[r] != w {
			t.Errorf("rejected %s: %d, want %d (all: %v)", r, s.Rejected[r], w, s.Rejected)
		}
	}
	if s.Received != 2 {
		t.Errorf("received %d, want 2", s.Received)
	}
}

// Without keys, events are unsigned and accepted as before; a signed one is
// accepted too (its signature is not checked).
func TestUnsignedBroadcastsStillWork(t *testing.T) {
	n, err := embedded.StartNATS()
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	pub, _ := broadcast.ConnectWith(n.URL, broadcast.Options{Keys: [][]byte{key1}, MaxAge: time.Second})
	defer pub.Close()
	sub, _ := broadcast.Connect(n.URL, "sub", nil)
	defer sub.Close()
	got := make(chan pacer.Event, 2)
	sub.Subscribe(func(e pacer.Event) { got <- e })
	sub.Flush(5 * time.Second)
	pub.Publish(pacer.Event{Kind: pacer.EventChanged, Campaign: "c", From: "x"})
	pub.Flush(5 * time.Second)
	select {
	case e := <-got:
		if e.From != "x" {
			t.Fatalf("got %+v", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
	if sub.Stats().Rejected != nil || sub.Signed() || !pub.Signed() {
		t.Fatal("an unkeyed receiver counts rejections or claims to verify")
	}
	if _, err := broadcast.ConnectWith(n.URL, broadcast.Options{Keys: [][]byte{[]byte("short")}, MaxAge: time.Second}); err == nil {
		t.Fatal("a short key accepted")
	}
}
