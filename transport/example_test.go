package transport_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/transport"
)

// budget is a stand-in for the daemon: one campaign with a fixed number of
// tokens. Like any Spender it is called from many connections at once.
type budget struct {
	mu     sync.Mutex
	tokens int64
}

func (b *budget) Spend(campaign pacer.CampaignID, amount pacer.Micros, _ string) (transport.Decision, error) {
	if campaign != "demo" {
		return transport.Paced, fmt.Errorf("unknown campaign %q", campaign)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tokens < int64(amount) {
		return transport.Exhausted, nil
	}
	b.tokens -= int64(amount)
	return transport.Allowed, nil
}

func (b *budget) Refund(pacer.CampaignID, pacer.Micros, string) error { return nil }

func (b *budget) Balance(pacer.CampaignID) (transport.Balance, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return transport.Balance{Tokens: b.tokens, State: "active"}, nil
}

func (b *budget) Info() []transport.InfoField { return nil }

func ExampleClient() {
	dir, _ := os.MkdirTemp("", "pacer")
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "pacer.sock")

	// pacerd's side: a server answering from the daemon's buckets.
	ln, err := transport.ListenUnix(sock, 0o660)
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := transport.NewServer(&budget{tokens: 1_500_000}, transport.ServerConfig{})
	go srv.Serve(ln)
	defer srv.Close()

	// The bidder's side.
	ctx := context.Background()
	c, err := transport.Dial(ctx, sock, transport.ClientOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	for _, auction := range []string{"a1", "a2"} {
		d, err := c.Spend(ctx, "demo", 1_000_000, auction)
		fmt.Println(auction, d, err)
	}
	_, err = c.Spend(ctx, "other", 1_000_000, "a3")
	var refused *transport.ServerError
	fmt.Println("a3", errors.As(err, &refused), err)
	b, _ := c.Balance(ctx, "demo")
	fmt.Println("tokens left:", b.Tokens)
	// Output:
	// a1 allowed <nil>
	// a2 exhausted <nil>
	// a3 true pacerd: unknown campaign "other"
	// tokens left: 500000
}
