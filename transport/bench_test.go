package transport

import (
	"context"
	"github.com/pacer/pacer"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/redcon"
)

// BenchmarkClientSpend is one SPEND round trip over the socket, through the
// Go client, the server and a trivial Spender.
func BenchmarkClientSpend(b *testing.B) {
	sp := newFakeSpender()
	sp.tokens["demo"] = 1 << 62
	ts := startServer(b, sp, ServerConfig{})
	c := dialClient(b, ts.path)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if d, err := c.Spend(ctx, "demo", 1, "auction-0123456789"); err != nil || d != Allowed {
			b.Fatal(d, err)
		}
	}
}

// BenchmarkClientSpendParallel is the same with many bidder goroutines
// sharing the client's pool.
func BenchmarkClientSpendParallel(b *testing.B) {
	sp := newFakeSpender()
	sp.tokens["demo"] = 1 << 62
	ts := startServer(b, sp, ServerConfig{})
	c := dialClient(b, ts.path)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Spend(ctx, "demo", 1, "auction-0123456789"); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// nopSpender isolates the server's own cost from the Spender's.
type nopSpender struct{}

func (nopSpender) Spend(pacer.CampaignID, pacer.Micros, string) (Decision, error) {
	return Allowed, nil
}
func (nopSpender) Refund(pacer.CampaignID, pacer.Micros, string) error { return nil }
func (nopSpender) Balance(pacer.CampaignID) (Balance, error)           { return Balance{}, nil }
func (nopSpender) Info() []InfoField                                   { return nil }

// clockedNop is nopSpender as a ClockedSpender, as the daemon is: the
// socket benchmarks take the path pacerd takes.
type clockedNop struct{ nopSpender }

func (clockedNop) Now() time.Time { return time.Now() }
func (clockedNop) SpendAt(now time.Time, _ pacer.CampaignID, _ pacer.Micros, _ string) (Decision, time.Time, error) {
	return Allowed, now, nil
}

// BenchmarkDispatchSpend is the server's per-command work after parsing:
// validation, the Spender call and the reply.
func BenchmarkDispatchSpend(b *testing.B) {
	s := NewServer(nopSpender{}, ServerConfig{MaxAmountMicros: 1_000_000})
	d := dispatcher{s: s, c: &serverConn{}}
	w := redcon.NewWriter(io.Discard)
	args := [][]byte{[]byte("SPEND"), []byte("campaign-42"), []byte("1500"), []byte("auction-0123456789")}
	b.ReportAllocs()
	for b.Loop() {
		d.serve(w, args)
		w.Flush()
	}
}

// BenchmarkDispatchSpendNoAuction: a SPEND without an auction id, whose
// campaign id the connection has seen before, allocates nothing.
func BenchmarkDispatchSpendNoAuction(b *testing.B) {
	s := NewServer(nopSpender{}, ServerConfig{MaxAmountMicros: 1_000_000})
	d := dispatcher{s: s, c: &serverConn{}}
	w := redcon.NewWriter(io.Discard)
	args := [][]byte{[]byte("SPEND"), []byte("campaign-42"), []byte("1500")}
	b.ReportAllocs()
	for b.Loop() {
		d.serve(w, args)
		w.Flush()
	}
}

// BenchmarkParseAndDispatchSpend adds the request reader's parsing, as a
// connection does for each request.
func BenchmarkParseAndDispatchSpend(b *testing.B) {
	s := NewServer(nopSpender{}, ServerConfig{})
	d := dispatcher{s: s, c: &serverConn{}}
	w := redcon.NewWriter(io.Discard)
	req := []byte(resp("SPEND", "campaign-42", "1500", "auction-0123456789"))
	src := &repeatReader{b: req}
	rd := newRequestReader(DefaultMaxArgs, DefaultMaxRequestBytes, DefaultMaxInlineBytes)
	b.ReportAllocs()
	for b.Loop() {
		args, err := rd.next()
		for args == nil && err == nil {
			if err = rd.fill(src); err == nil {
				args, err = rd.next()
			}
		}
		if err != nil {
			b.Fatal(err)
		}
		d.serve(w, args)
		w.Flush()
	}
}

// repeatReader yields one request per Read, like a bidder that waits for
// each reply.
type repeatReader struct{ b []byte }

func (r *repeatReader) Read(p []byte) (int, error) { return copy(p, r.b), nil }

// BenchmarkSocketSpend is the whole socket path of one SPEND as a bidder
// that waits for each reply sees it: the client's write, the server's read,
// parse, decision (a Spender that answers at once) and reply, and the
// client's read, over a real Unix socket, for each kind of server. The
// client side allocates nothing, so allocs/op is the server's.
//
// Its ns/op is not the servers' cost: the client here is a goroutine of
// the same process, and with epoll it shares the scheduler with loops that
// block in epoll_wait, which makes a ping-pong 3-4x slower in wall time
// than across processes (where redis-benchmark -c 1 sees both servers at
// the same rate). CPU per call is measured by scripts/bench-resp.sh.
func BenchmarkSocketSpend(b *testing.B) {
	for _, kind := range serverKinds() {
		b.Run(string(kind), func(b *testing.B) { benchSocket(b, kind, 1) })
	}
}

// BenchmarkSocketSpendPipelined: 16 SPENDs per write, as redis-benchmark
// -P 16 sends them; one op is one SPEND.
func BenchmarkSocketSpendPipelined(b *testing.B) {
	for _, kind := range serverKinds() {
		b.Run(string(kind), func(b *testing.B) { benchSocket(b, kind, 16) })
	}
}

// BenchmarkSocketSpendConns: 8 connections at once, each a bidder that
// waits for each reply, so that event loops find several ready per
// wake-up (socket_server hybrid's batches through io_uring); one op is one
// SPEND.
func BenchmarkSocketSpendConns(b *testing.B) {
	for _, kind := range serverKinds() {
		b.Run(string(kind), func(b *testing.B) {
			ts := startServer(b, clockedNop{}, ServerConfig{Server: kind})
			req := []byte(resp("SPEND", "campaign-42", "1500"))
			const conns = 8
			type bidder struct {
				c     net.Conn
				reply []byte
			}
			pool := make(chan bidder, conns)
			for range conns {
				c, err := net.Dial("unix", ts.path)
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				// The campaign is interned on a connection's first SPEND.
				reply := make([]byte, len(":1\r\n"))
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, reply); err != nil {
					b.Fatal(err)
				}
				pool <- bidder{c, reply}
			}
			b.SetParallelism(conns / runtime.GOMAXPROCS(0))
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				bd := <-pool
				c, reply := bd.c, bd.reply
				for pb.Next() {
					if _, err := c.Write(req); err != nil {
						b.Error(err)
						return
					}
					if _, err := io.ReadFull(c, reply); err != nil || string(reply) != ":1\r\n" {
						b.Errorf("reply %q, %v", reply, err)
						return
					}
				}
			})
		})
	}
}

func benchSocket(b *testing.B, kind SocketServer, pipeline int) {
	ts := startServer(b, clockedNop{}, ServerConfig{Server: kind})
	c, err := net.Dial("unix", ts.path)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	req := []byte(strings.Repeat(resp("SPEND", "campaign-42", "1500"), pipeline))
	want := strings.Repeat(":1\r\n", pipeline)
	reply := make([]byte, len(want))
	roundTrip := func() {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, reply); err != nil {
			b.Fatal(err)
		}
	}
	roundTrip() // the campaign id is interned on first sight
	if string(reply) != want {
		b.Fatalf("reply %q, want %q", reply, want)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += pipeline {
		roundTrip()
	}
}
