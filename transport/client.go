package transport

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pacer/pacer"
	"github.com/redis/go-redis/v9"
)

// ClientOptions tunes a Client. The zero value gives go-redis's defaults
// (a pool of 10 connections per CPU, 5 s dial timeout, 3 s read/write
// timeouts); bidders usually want a ReadTimeout well under their auction
// deadline.
type ClientOptions struct {
	PoolSize     int
	DialTimeout  time.Duration
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
}

// Client talks to pacerd over its Unix socket. It keeps a pool of
// connections and is safe for concurrent use by many goroutines; share one
// per process. The zero value is not usable: create it with Dial.
type Client struct {
	rdb *redis.Client
}

// ServerError is a request the daemon refused ("-ERR ..." on the wire), as
// opposed to a failure to reach it. Callers branch on it with errors.As:
// retrying a refused request is pointless, retrying after a network error
// may not be.
type ServerError struct {
	Msg string // the daemon's message, without the "ERR " prefix
}

func (e *ServerError) Error() string { return "pacerd: " + e.Msg }

// Dial connects to the daemon's socket and checks it answers PING, so a
// wrong path fails at start-up rather than at the first auction.
func Dial(ctx context.Context, socketPath string, opts ClientOptions) (*Client, error) {
	c := &Client{rdb: redis.NewClient(&redis.Options{
		Network:      "unix",
		Addr:         socketPath,
		Protocol:     2,
		PoolSize:     opts.PoolSize,
		DialTimeout:  opts.DialTimeout,
		ReadTimeout:  opts.ReadTimeout,
		WriteTimeout: opts.WriteTimeout,
		// A SPEND that timed out may have been applied: resending it
		// could spend twice. The caller decides, knowing the auction.
		MaxRetries:      -1,
		DisableIdentity: true,
	})}
	if err := c.Ping(ctx); err != nil {
		c.rdb.Close()
		return nil, fmt.Errorf("transport: dial %s: %w", socketPath, err)
	}
	return c, nil
}

// Spend asks whether campaign may spend amountMicros on an auction.
// auctionID may be empty.
func (c *Client) Spend(ctx context.Context, campaign string, amountMicros int64, auctionID string) (pacer.Decision, error) {
	n, err := c.do(ctx, spendArgs("SPEND", campaign, amountMicros, auctionID)...).Int64()
	if err != nil {
		return pacer.Paced, wrap(err)
	}
	switch d := pacer.Decision(n); d {
	case pacer.Allowed, pacer.Paced, pacer.Exhausted:
		return d, nil
	}
	return pacer.Paced, fmt.Errorf("transport: unexpected SPEND reply %d", n)
}

// Refund gives amountMicros back to campaign, e.g. when an allowed auction
// was lost.
func (c *Client) Refund(ctx context.Context, campaign string, amountMicros int64, auctionID string) error {
	_, err := c.do(ctx, spendArgs("REFUND", campaign, amountMicros, auctionID)...).Int64()
	return wrap(err)
}

// Balance returns the daemon's local view of campaign.
func (c *Client) Balance(ctx context.Context, campaign string) (pacer.Balance, error) {
	vals, err := c.do(ctx, "BALANCE", campaign).Slice()
	if err != nil {
		return pacer.Balance{}, wrap(err)
	}
	if len(vals)%2 != 0 {
		return pacer.Balance{}, fmt.Errorf("transport: BALANCE reply has %d elements", len(vals))
	}
	var b pacer.Balance
	for i := 0; i < len(vals); i += 2 {
		key, _ := vals[i].(string)
		var ok bool
		switch key {
		case "tokens":
			b.Tokens, ok = vals[i+1].(int64)
		case "reserve":
			b.Reserve, ok = vals[i+1].(int64)
		case "pace":
			b.PacePerSecond, ok = vals[i+1].(int64)
		case "state":
			b.State, ok = vals[i+1].(string)
		default:
			ok = true // fields added by a newer daemon
		}
		if !ok {
			return pacer.Balance{}, fmt.Errorf("transport: BALANCE field %q has type %T", key, vals[i+1])
		}
	}
	return b, nil
}

// Ping checks the daemon answers.
func (c *Client) Ping(ctx context.Context) error {
	return wrap(c.rdb.Ping(ctx).Err())
}

// Info returns the daemon's INFO text ("# pacer\r\nkey:value\r\n...").
func (c *Client) Info(ctx context.Context) (string, error) {
	s, err := c.rdb.Info(ctx).Result()
	return s, wrap(err)
}

// Close closes the pool. Requests in flight fail.
func (c *Client) Close() error {
	return c.rdb.Close()
}

func (c *Client) do(ctx context.Context, args ...any) *redis.Cmd {
	return c.rdb.Do(ctx, args...)
}

func spendArgs(cmd, campaign string, amountMicros int64, auctionID string) []any {
	if auctionID == "" {
		return []any{cmd, campaign, amountMicros}
	}
	return []any{cmd, campaign, amountMicros, auctionID}
}

// wrap turns "-ERR" replies into *ServerError and leaves transport errors
// as go-redis returned them.
func wrap(err error) error {
	var re redis.Error
	if err == nil || errors.Is(err, redis.Nil) || !errors.As(err, &re) {
		return err
	}
	return &ServerError{Msg: strings.TrimPrefix(re.Error(), "ERR ")}
}
