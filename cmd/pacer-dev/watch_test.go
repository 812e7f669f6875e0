package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/redistest"
)

// watcher runs watchFleet on probes, one round at a time.
type watcher struct {
	out       bytes.Buffer
	tick      chan time.Time
	roundDone chan struct{}
	cancel    context.CancelFunc
	done      chan struct{}
}

func startWatcher(t *testing.T, probes []probe) *watcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{tick: make(chan time.Time), roundDone: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	// A last probe, run after the others have printed, ends each round.
	probes = append(probes, probe{name: "end of round", check: func(context.Context) error {
		w.roundDone <- struct{}{}
		return nil
	}})
	at := time.Date(2026, 11, 27, 21, 0, 0, 0, time.UTC)
	go func() {
		defer close(w.done)
		watchFleet(ctx, &w.out, w.tick, func() time.Time { return at }, probes)
	}()
	t.Cleanup(w.stop)
	return w
}

// round runs one round of probes and returns what it printed.
func (w *watcher) round() string {
	before := w.out.Len()
	w.tick <- time.Time{}
	<-w.roundDone
	return w.out.String()[before:]
}

func (w *watcher) stop() {
	if w.cancel != nil {
		w.cancel()
		<-w.done
		w.cancel = nil
	}
}

// The terminal hears of a change once, in each direction.
func TestWatchFleetPrintsTransitions(t *testing.T) {
	var err error
	w := startWatcher(t, []probe{{name: "thing", lost: " (so what)", check: func(context.Context) error { return err }}})
	if got := w.round(); got != "" {
		t.Errorf("well: printed %q", got)
	}
	err = errors.New("broken")
	if got, want := w.round(), "pacer-dev 21:00:00: thing: broken (so what)\n"; got != want {
		t.Errorf("broken: printed %q, want %q", got, want)
	}
	if got := w.round(); got != "" {
		t.Errorf("still broken, same reason: printed %q", got)
	}
	err = nil
	if got, want := w.round(), "pacer-dev 21:00:00: thing: ok again\n"; got != want {
		t.Errorf("recovered: printed %q, want %q", got, want)
	}
}

// A real redis-server killed and started again, and a pacerd's /readyz
// answering 503 with its reason, reach the terminal.
func TestWatchFleetSeesRedisDieAndReadyz(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	var notReady atomic.Pointer[string] // the HTTP server's goroutines read it
	notReady.Store(new(string))
	ready := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if why := *notReady.Load(); why != "" {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	}))
	defer ready.Close()
	w := startWatcher(t, []probe{redisProbe(rdb, "redis.sock"), readyProbe("pacerd-1", ready.URL+"/readyz")})
	if got := w.round(); got != "" {
		t.Fatalf("all well: printed %q", got)
	}
	srv.Kill()
	why := "not ready: no new leases: durability: connection refused"
	notReady.Store(&why)
	got := w.round()
	for _, want := range []string{
		"pacer-dev 21:00:00: redis-server (ledger) redis.sock: ",
		"the daemons serve from the leases they hold until those expire, then deny",
		"pacer-dev 21:00:00: pacerd-1: not ready: no new leases: durability: connection refused\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("redis-server killed: printed %q\nwant it to contain %q", got, want)
		}
	}
	if err := srv.Server.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	notReady.Store(new(string))
	if got, want := w.round(), "pacer-dev 21:00:00: redis-server (ledger) redis.sock: ok again\npacer-dev 21:00:00: pacerd-1: ok again\n"; got != want {
		t.Errorf("back: printed %q, want %q", got, want)
	}
}
