package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer/pacer/lease"
)

// freeLoopbackAddr returns a loopback TCP address free a moment ago, for an
// admin listener.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// readyz says why it is not ready: starting or stopping, or the reason the
// ledger gate gives (here a clock beyond the skew bound).
func TestReadyzReasons(t *testing.T) {
	var ready atomic.Bool
	var gateErr error
	h := readyz(&ready, func(context.Context) error { return gateErr })
	for _, tc := range []struct {
		step     string
		ready    bool
		gate     error
		code     int
		wantBody string
	}{
		{"starting", false, nil, http.StatusServiceUnavailable, "not ready: starting or stopping\n"},
		{"up, gate open", true, nil, http.StatusOK, "ready\n"},
		{"clock off", true, fmt.Errorf("no new leases: clock: %w", lease.ErrClockSkew), http.StatusServiceUnavailable,
			"not ready: no new leases: clock: " + lease.ErrClockSkew.Error() + "\n"},
		{"two checks fail", true, errors.Join(errors.New("durability: connection refused"), errors.New("clock: connection refused")),
			http.StatusServiceUnavailable, "not ready: durability: connection refused; clock: connection refused\n"},
		{"gate open again", true, nil, http.StatusOK, "ready\n"},
		{"stopping", false, nil, http.StatusServiceUnavailable, "not ready: starting or stopping\n"},
	} {
		ready.Store(tc.ready)
		gateErr = tc.gate
		rec := httptest.NewRecorder()
		h(rec, httptest.NewRequest("GET", "/readyz", nil))
		if rec.Code != tc.code || rec.Body.String() != tc.wantBody {
			t.Errorf("%s: %d %q, want %d %q", tc.step, rec.Code, rec.Body.String(), tc.code, tc.wantBody)
		}
	}
	// Without a gate (no ledger checks configured) only ready counts.
	ready.Store(true)
	rec := httptest.NewRecorder()
	readyz(&ready, nil)(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("no gate: %d %q", rec.Code, rec.Body.String())
	}
}

// A real pacerd's /readyz turns 503, naming the ledger, while its
// redis-server is down, and 200 again once it is back.
func TestReadyzFollowsTheLedger(t *testing.T) {
	s := newStack(t)
	s.campaign("c", 86_400_000_000)
	s.extraConfig = "ledger:\n  check_interval: 1s\n"
	addr := freeLoopbackAddr(t)
	p := s.startWith("h1", []string{"--admin", addr}, nil)
	// Generous deadlines: the gate checks every second; at a load average
	// of 20 a check and a race-built pacerd can take far longer.
	waitReadyz := func(step string, code int, body string) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		var last string
		for {
			resp, err := http.Get("http://" + addr + "/readyz")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				last = fmt.Sprintf("%d %q", resp.StatusCode, b)
				if resp.StatusCode == code && strings.Contains(string(b), body) {
					return
				}
			} else {
				last = err.Error()
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: /readyz still %s, want %d containing %q\n%s", step, last, code, body, p.Output.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitReadyz("up", http.StatusOK, "ready")
	s.redis.Kill()
	waitReadyz("redis-server killed", http.StatusServiceUnavailable, "not ready: no new leases: durability: ")
	if err := s.redis.Server.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitReadyz("redis-server back", http.StatusOK, "ready")
}
