package transport

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func dialClient(t testing.TB, path string) *Client {
	t.Helper()
	c, err := Dial(context.Background(), path, ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestClient(t *testing.T) {
	ctx := context.Background()
	sp := newFakeSpender()
	ts := startServer(t, sp, ServerConfig{MaxAmountMicros: 1_000_000})
	c := dialClient(t, ts.path)

	spends := []struct {
		campaign string
		amount   int64
		auction  string
		want     Decision
		wantErr  string // ServerError message
	}{
		{"demo", 600, "auction-1", Allowed, ""},
		{"demo", 600, "", Paced, ""},
		{"demo", 400, "", Allowed, ""},
		{"empty", 1, "", Exhausted, ""},
		{"nope", 1, "", 0, `unknown campaign "nope"`},
		{"demo", 0, "", 0, "amount must be positive"},
		{"demo", 2_000_000, "", 0, "amount 2000000 exceeds the per-call maximum 1000000"},
		{"", 1, "", 0, "campaign id must not be empty"},
	}
	for i, st := range spends {
		got, err := c.Spend(ctx, st.campaign, st.amount, st.auction)
		if st.wantErr != "" {
			var se *ServerError
			if !errors.As(err, &se) || se.Msg != st.wantErr {
				t.Errorf("step %d: err = %v, want ServerError %q", i, err, st.wantErr)
			}
			continue
		}
		if err != nil || got != st.want {
			t.Errorf("step %d: Spend(%q, %d) = %v, %v; want %v", i, st.campaign, st.amount, got, err, st.want)
		}
	}
	if sp.auction[0] != "auction-1" {
		t.Errorf("auction id not passed: %q", sp.auction)
	}

	if err := c.Refund(ctx, "demo", 250, "auction-1"); err != nil {
		t.Fatal(err)
	}
	err := c.Refund(ctx, "nope", 1, "")
	if err == nil || err.Error() != `pacerd: unknown campaign "nope"` {
		t.Errorf("Refund(nope) = %v", err)
	}

	b, err := c.Balance(ctx, "demo")
	if want := (Balance{Tokens: 250, Reserve: 5000, PacePerSecond: 250, State: "active"}); err != nil || b != want {
		t.Errorf("Balance = %+v, %v; want %+v", b, err, want)
	}
	if _, err := c.Balance(ctx, "nope"); err == nil {
		t.Error("Balance(nope): no error")
	}

	if err := c.Ping(ctx); err != nil {
		t.Error(err)
	}
	info, err := c.Info(ctx)
	if err != nil || !strings.HasPrefix(info, "# pacer\r\ncampaigns:3\r\n") {
		t.Errorf("Info = %q, %v", info, err)
	}
}

func TestClientConcurrent(t *testing.T) {
	ctx := context.Background()
	sp := newFakeSpender()
	sp.tokens["demo"] = 1000
	ts := startServer(t, sp, ServerConfig{})
	c := dialClient(t, ts.path)

	// 1000 tokens, 2000 spends of 1 from many goroutines: exactly 1000
	// must be allowed, whatever the interleaving over the pool.
	var mu sync.Mutex
	counts := map[Decision]int{}
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				d, err := c.Spend(ctx, "demo", 1, "")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				counts[d]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if counts[Allowed] != 1000 || counts[Exhausted] != 1000 {
		t.Errorf("decisions = %v", counts)
	}
}

func TestDialMissingSocket(t *testing.T) {
	path := filepath.Join(socketDir(t), "absent.sock")
	if _, err := Dial(context.Background(), path, ClientOptions{}); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("Dial = %v, want an error naming the path", err)
	}
}

func TestClientAfterServerClose(t *testing.T) {
	ctx := context.Background()
	ts := startServer(t, newFakeSpender(), ServerConfig{})
	c := dialClient(t, ts.path)
	ts.Close()
	if _, err := c.Spend(ctx, "demo", 1, ""); err == nil {
		t.Fatal("Spend after server close: no error")
	} else if se := (*ServerError)(nil); errors.As(err, &se) {
		t.Fatalf("transport failure reported as server refusal: %v", err)
	}
}

func TestDecisionString(t *testing.T) {
	for d, want := range map[Decision]string{Allowed: "allowed", Paced: "paced", Exhausted: "exhausted", 7: "Decision(7)"} {
		if got := d.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(d), got, want)
		}
	}
}
