package main

import (
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/transport"
)

// A fresh pacerd (a real process; redis-server with appendfsync always),
// one saturating client, a campaign far behind its curve (mid-day in its
// time zone, nothing spent): within 2 s of its first answer it allows at
// least 80% of the pace, and it catches up at the catch-up multiple (3x):
// no 10-second window above 3x the pace and what a full bucket (the burst
// window, 1 s here) carries into it, none after the first below 2.5x.
func TestFreshPacerdPacesFromItsFirstSeconds(t *testing.T) {
	s := newStack(t)
	const pace = 20_000 // micros a second
	const bid = 1_000
	tz := midDayZone(t, time.Now())
	if _, err := s.ledger.PutCampaign(ctx, lease.Campaign{ID: "c", DailyMicros: pace * 86_400, TZ: tz, Curve: "flat", Shards: 4, State: lease.StateActive}); err != nil {
		t.Fatal(err)
	}
	p := s.start("h0")
	defer terminate(t, p)
	var c *transport.Client
	deadline := time.Now().Add(time.Minute)
	for c == nil {
		var err error
		if c, err = transport.Dial(ctx, p.socket, transport.ClientOptions{}); err != nil {
			if time.Now().After(deadline) {
				t.Fatalf("pacerd did not answer on its socket within a minute: %v\n%s", err, p.Output.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	defer c.Close()
	const run = 32 * time.Second
	var first time.Time
	var allowed []time.Duration // since the first answer
	for {
		dec, err := c.Spend(ctx, "c", bid, "")
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		if first.IsZero() {
			first = now
		}
		at := now.Sub(first)
		if at >= run {
			break
		}
		if dec == pacer.Allowed {
			allowed = append(allowed, at)
		}
	}
	count := func(from, to time.Duration) int64 {
		var n int64
		for _, a := range allowed {
			if a >= from && a < to {
				n += bid
			}
		}
		return n
	}
	start := count(0, 2*time.Second)
	t.Logf("campaign in %s: %.0f%% of the pace in the first 2 s", tz, 100*float64(start)/(2*pace))
	if start < 2*pace*80/100 {
		t.Errorf("a fresh pacerd allowed %d micros in its first 2 s; want at least 80%% of the pace's %d", start, 2*pace)
	}
	const burst = time.Second // testConfig's burst_window
	for from := 2 * time.Second; from+10*time.Second <= run; from += 10 * time.Second {
		got := count(from, from+10*time.Second)
		ratio := float64(got) / (10 * pace)
		t.Logf("10 s from %s: %.2fx the pace", from, ratio)
		if most := 3 * pace * (10*time.Second + burst).Seconds(); float64(got) > most {
			t.Errorf("10 s from %s: %.2fx the pace; the catch-up bound is 3x, and a full bucket (%s of it) carried in", from, ratio, burst)
		}
		if ratio < 2.5 {
			t.Errorf("10 s from %s: %.2fx the pace; far behind with demand to spare, it should catch up at 3x", from, ratio)
		}
	}
}

// midDayZone is a time zone in which now is between 08:00 and 16:00.
func midDayZone(t *testing.T, now time.Time) string {
	t.Helper()
	for _, tz := range []string{"UTC", "Europe/Berlin", "Asia/Kolkata", "Asia/Tokyo", "Pacific/Auckland",
		"Pacific/Kiritimati", "Pacific/Honolulu", "America/Los_Angeles", "America/Chicago", "America/New_York", "America/Sao_Paulo"} {
		loc, err := time.LoadLocation(tz)
		if err != nil {
			t.Fatal(err)
		}
		if h := now.In(loc).Hour(); h >= 8 && h < 16 {
			return tz
		}
	}
	t.Fatalf("no time zone of the list is at mid-day at %s", now)
	return ""
}
