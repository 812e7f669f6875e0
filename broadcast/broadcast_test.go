package broadcast_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/pacer/pacer"
	"github.com/pacer/pacer/broadcast"
	"github.com/pacer/pacer/internal/embedded"
)

func TestBroadcastRoundTrip(t *testing.T) {
	n, err := embedded.StartNATS()
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	pub, err := broadcast.Connect(n.URL, "pub", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := broadcast.Connect(n.URL, "sub", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	got := make(chan pacer.Event, 10)
	if err := sub.Subscribe(func(e pacer.Event) { got <- e }); err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(time.Second); err != nil {
		t.Fatal(err)
	}
	// Bad events are refused at the sender.
	for _, e := range []pacer.Event{{Kind: "nuke", Campaign: "c"}, {Kind: pacer.EventRevoked, Campaign: "a.b"}, {Kind: pacer.EventRevoked}} {
		if err := pub.Publish(e); err == nil {
			t.Errorf("Publish(%+v) accepted", e)
		}
	}
	// Garbage on a pacer subject is dropped by the receiver.
	raw, err := nats.Connect(n.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.Publish("pacer.revoked.c", []byte("{not json"))
	raw.Publish("pacer.revoked.c", []byte(`{"kind":"revoked","campaign":"other"}`))
	raw.Flush()

	want := pacer.Event{Kind: pacer.EventExhausted, Campaign: "c", Day: "2026-11-21", From: "h1", AtMillis: 42}
	if err := pub.Publish(want); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-got:
		if e != want {
			t.Fatalf("got %+v, want %+v", e, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("event not received")
	}
	// The counters are updated after the handler returns: give them a moment.
	deadline := time.Now().Add(5 * time.Second)
	for s := sub.Stats(); s.Dropped != 2 || s.Received != 1; s = sub.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v: want 2 dropped, 1 received", s)
		}
		time.Sleep(time.Millisecond)
	}
}
