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
	pos, err := a.parseArgs(newFlagSet("spend"), args, "<campaign> <MONEY> [auction-id]")
	if err != nil {
		return err
	}
	campaign, micros, auction, err := amountArgs("spend", pos)
	if err != nil {
		return err
	}
	c, err := a.dialDaemon(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	d, err := c.Spend(ctx, campaign, micros, auction)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(spendResult{campaign, micros, d.String(), int(d)})
	}
	fmt.Fprintf(a.stdout, "%s %d\n", d, int(d))
	return nil
}

func (a *app) refund(ctx context.Context, args []string) error {
	pos, err := a.parseArgs(newFlagSet("refund"), args, "<campaign> <MONEY> [auction-id]")
	if err != nil {
		return err
	}
	campaign, micros, auction, err := amountArgs("refund", pos)
	if err != nil {
		return err
	}
	c, err := a.dialDaemon(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Refund(ctx, campaign, micros, auction); err != nil {
		return err
	}
	if a.json {
		return a.printJSON(spendResult{campaign, micros, "refunded", 1})
	}
	fmt.Fprintf(a.stdout, "refunded %d\n", micros)
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
