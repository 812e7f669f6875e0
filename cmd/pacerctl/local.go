package main

import (
	"context"
	"fmt"
	"time"

	"github.com/pacer/pacer/transport"
)

// dialDaemon connects to the local pacerd on --socket.
func (a *app) dialDaemon(ctx context.Context) (*transport.Client, error) {
	return transport.Dial(ctx, a.socket, transport.ClientOptions{
		PoolSize: 1, DialTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
	})
}

// amountArgs parses "<campaign> <MONEY> [auction-id]".
func amountArgs(cmd string, pos []string) (campaign string, micros int64, auction string, err error) {
	if len(pos) < 2 || len(pos) > 3 {
		return "", 0, "", usagef("%s: want <campaign> <MONEY> [auction-id], got %d arguments", cmd, len(pos))
	}
	micros, err = parseMoney(pos[1])
	if err != nil {
		return "", 0, "", usagef("%s: %v", cmd, err)
	}
	if micros == 0 {
		return "", 0, "", usagef("%s: amount must be positive", cmd)
	}
	if len(pos) == 3 {
		auction = pos[2]
	}
	return pos[0], micros, auction, nil
}

type spendResult struct {
	Campaign     string `json:"campaign"`
	AmountMicros int64  `json:"amount_micros"`
	Decision     string `json:"decision"`
	Reply        int    `json:"reply"`
}

func (a *app) spend(ctx context.Context, args []string) error {
	return a.amountCall(ctx, "spend", args, func(c *transport.Client, r *spendResult, auction string) error {
		d, err := c.Spend(ctx, r.Campaign, r.AmountMicros, auction)
		r.Decision, r.Reply = d.String(), int(d)
		return err
	}, func(r spendResult) string { return fmt.Sprintf("%s %d", r.Decision, r.Reply) })
}

func (a *app) refund(ctx context.Context, args []string) error {
	return a.amountCall(ctx, "refund", args, func(c *transport.Client, r *spendResult, auction string) error {
		r.Decision, r.Reply = "refunded", 1
		return c.Refund(ctx, r.Campaign, r.AmountMicros, auction)
	}, func(r spendResult) string { return fmt.Sprintf("refunded %d", r.AmountMicros) })
}

// amountCall is what spend and refund share: parse "<campaign> <MONEY>
// [auction-id]", dial pacerd, make the call, print its result as JSON or
// as text's line.
func (a *app) amountCall(ctx context.Context, cmd string, args []string,
	call func(c *transport.Client, r *spendResult, auction string) error, text func(spendResult) string) error {
	pos, err := a.parseArgs(newFlagSet(cmd), args, "<campaign> <MONEY> [auction-id]")
	if err != nil {
		return err
	}
	campaign, micros, auction, err := amountArgs(cmd, pos)
	if err != nil {
		return err
	}
	c, err := a.dialDaemon(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	r := spendResult{Campaign: campaign, AmountMicros: micros}
	if err := call(c, &r, auction); err != nil {
		return err
	}
	if a.json {
		return a.printJSON(r)
	}
	fmt.Fprintln(a.stdout, text(r))
	return nil
}

type balanceResult struct {
	Campaign      string `json:"campaign"`
	Tokens        int64  `json:"tokens"`
	Reserve       int64  `json:"reserve"`
	PacePerSecond int64  `json:"pace_per_second"`
	State         string `json:"state"`
}

func (a *app) balance(ctx context.Context, args []string) error {
	pos, err := a.parseArgs(newFlagSet("balance"), args, "<campaign>")
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("balance: want exactly one campaign id, got %d arguments", len(pos))
	}
	c, err := a.dialDaemon(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	b, err := c.Balance(ctx, pos[0])
	if err != nil {
		return err
	}
	r := balanceResult{pos[0], b.Tokens, b.Reserve, b.PacePerSecond, b.State}
	if a.json {
		return a.printJSON(r)
	}
	fmt.Fprintf(a.stdout, "tokens=%d reserve=%d pace=%d/s state=%s\n", r.Tokens, r.Reserve, r.PacePerSecond, r.State)
	return nil
}
