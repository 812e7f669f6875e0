// Command goclient is a bidder's smallest use of pacer's Go client, in a
// module of its own: it shows (and CI checks, compat/gomodule_test.go) that
// another module can import github.com/pacer/pacer/transport.
//
// pacer is not published on a module proxy, so the bidder's go.mod points
// the module path at a checkout of this repository with a replace directive:
//
//	require github.com/pacer/pacer v0.0.0
//	replace github.com/pacer/pacer => ../pacer   // path to your checkout
//
// Run it against the dev fleet (`make run`):
//
//	go run . -socket ../../.run/pacer-1.sock
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/pacer/pacer/transport"
)

func main() {
	socket := flag.String("socket", ".run/pacer-1.sock", "pacerd's Unix `socket`")
	campaign := flag.String("campaign", "demo", "campaign `id`")
	// A read timeout below the auction deadline: a bidder skips an auction
	// rather than wait. It also bounds Dial's first PING.
	readTimeout := flag.Duration("read-timeout", 20*time.Millisecond, "give up on a reply after this long")
	timeout := flag.Duration("timeout", 5*time.Second, "give up on the whole run after this long")
	flag.Parse()
	if err := run(*socket, *campaign, *readTimeout, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "goclient:", err)
		os.Exit(1)
	}
}

func run(socket, campaign string, readTimeout, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// One Client per process: it pools connections and is safe for
	// concurrent use.
	c, err := transport.Dial(ctx, socket, transport.ClientOptions{ReadTimeout: readTimeout})
	if err != nil {
		return fmt.Errorf("%w (is pacerd running? `make run` starts a dev fleet)", err)
	}
	defer c.Close()

	d, err := c.Spend(ctx, campaign, 1500, "auction-1")
	var refused *transport.ServerError
	switch {
	case errors.As(err, &refused):
		return fmt.Errorf("pacerd refused the SPEND: %s", refused.Msg)
	case err != nil:
		// A timeout: the SPEND may or may not have been applied. Skip
		// the auction; do not resend.
		return err
	}
	fmt.Println("SPEND:", d) // allowed, paced or exhausted
	if d == transport.Allowed {
		// The auction was lost: give the amount back.
		if err := c.Refund(ctx, campaign, 1500, "auction-1"); err != nil {
			return err
		}
	}
	b, err := c.Balance(ctx, campaign)
	if err != nil {
		return err
	}
	fmt.Printf("BALANCE: %d micros spendable now, pace %d micros/s, %s\n", b.Tokens, b.PacePerSecond, b.State)
	return nil
}
