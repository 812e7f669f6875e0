package pacer_test

import (
	"testing"

	"github.com/pacer/pacer"
)

func TestDecisionString(t *testing.T) {
	for _, tc := range []struct {
		d    pacer.Decision
		want string
	}{
		{pacer.Allowed, "allowed"},
		{pacer.Paced, "paced"},
		{pacer.Exhausted, "exhausted"},
		{pacer.Decision(7), "Decision(7)"},
	} {
		if got := tc.d.String(); got != tc.want {
			t.Errorf("Decision(%d).String() = %q, want %q", int(tc.d), got, tc.want)
		}
	}
	// The values are the wire's: a bidder in any language branches on them.
	if pacer.Exhausted != -1 || pacer.Paced != 0 || pacer.Allowed != 1 {
		t.Errorf("wire values changed: exhausted %d, paced %d, allowed %d", pacer.Exhausted, pacer.Paced, pacer.Allowed)
	}
}

func TestEventValidate(t *testing.T) {
	for _, tc := range []struct {
		e  pacer.Event
		ok bool
	}{
		{pacer.Event{Kind: pacer.EventExhausted, Campaign: "c1", Day: "2026-11-21"}, true},
		{pacer.Event{Kind: pacer.EventRevoked, Campaign: "c1"}, true},
		{pacer.Event{Kind: pacer.EventChanged, Campaign: "c1"}, true},
		{pacer.Event{Kind: pacer.EventLostWrites, Campaign: "c1"}, true},
		{pacer.Event{Kind: "paused", Campaign: "c1"}, false},
		{pacer.Event{Kind: pacer.EventChanged}, false},
		{pacer.Event{Kind: pacer.EventChanged, Campaign: "a.b"}, false},
		{pacer.Event{Kind: pacer.EventChanged, Campaign: "a*"}, false},
		{pacer.Event{Kind: pacer.EventChanged, Campaign: ">"}, false},
		{pacer.Event{Kind: pacer.EventChanged, Campaign: "a b"}, false},
		{pacer.Event{Kind: pacer.EventChanged, Campaign: "a\n"}, false},
	} {
		if err := tc.e.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: Validate() = %v, want ok=%v", tc.e, err, tc.ok)
		}
	}
}
