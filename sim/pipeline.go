package sim

import (
	"context"
	"runtime"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// autoPipe is a go-redis hook that sends the ledger scripts (FCALL,
// EVALSHA) and the single reads (HMGET, HGETALL, XRANGE, ...) that the
// daemons' refill loops issue at the same time in one pipeline: each call
// is still one command that Redis runs atomically on its own, with its own
// reply; only the transport is shared. The first caller to find no
// pipeline in flight sends everything queued, and keeps sending what queued
// meanwhile until nothing is left; the others wait for their reply. The
// simulator's daemons make ~1.6 million such calls a default day, dozens at
// once in each step (every due campaign of every host), and one write and
// one read per call cost pacersim and redis-server more than the scripts'
// own work. A daemon's reads (its idle checks' watermark and run-totals
// reads, ~0.16 million a default day) come after its step's lease calls,
// at about the same moment on every host: alone, each was a round trip of
// its own.
//
// It must be the client's innermost hook (added after every other): it
// does not call the hooks after it. Other commands (writes outside
// scripts, anything that blocks or opens a transaction) go through
// unchanged.
type autoPipe struct {
	raw redis.UniversalClient // the same Redis, without hooks: sends the pipelines

	mu       sync.Mutex
	queue    []*pipeCall
	flushing bool
	batches  int64 // pipelines sent (for tests and profiles)
	calls    int64 // calls they carried
}

type pipeCall struct {
	cmd  redis.Cmder
	done chan struct{}
}

// pipelined reports whether cmd is a ledger script call or a read that
// neither blocks nor waits for anything but its reply, the only commands
// the hook batches: a blocking read (XREAD BLOCK, WAIT) or a transaction
// must not share a pipeline with them.
func pipelined(cmd redis.Cmder) bool {
	switch strings.ToLower(cmd.Name()) {
	case "fcall", "evalsha", "hmget", "hget", "hgetall", "hkeys", "hlen", "hexists", "exists", "get", "xrange", "xrevrange":
		return true
	}
	return false
}

// DialHook implements redis.Hook.
func (p *autoPipe) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessPipelineHook implements redis.Hook.
func (p *autoPipe) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// ProcessHook implements redis.Hook.
func (p *autoPipe) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !pipelined(cmd) {
			return next(ctx, cmd)
		}
		c := &pipeCall{cmd: cmd, done: make(chan struct{})}
		p.mu.Lock()
		p.queue = append(p.queue, c)
		if p.flushing {
			p.mu.Unlock()
			<-c.done // the flusher fills cmd; it is read only after
			return cmd.Err()
		}
		p.flushing = true
		p.mu.Unlock()
		p.flush(context.WithoutCancel(ctx))
		return cmd.Err()
	}
}

// gatherYields bounds how often a flusher yields, per pipeline, to let the
// callers that are about to queue do so (gather).
const gatherYields = 8

// gather lets the goroutines that are runnable now (the other campaigns
// and hosts of a step, on their way to their own ledger call) run and queue
// their calls before a pipeline is sent: it yields the processor until a
// yield adds nothing to the queue, at most gatherYields times. Without it
// the first call of a step went alone and the rest in the next pipeline:
// every pipeline is a round trip, and a step waits for each in turn.
func (p *autoPipe) gather() {
	p.mu.Lock()
	n := len(p.queue)
	p.mu.Unlock()
	for range gatherYields {
		runtime.Gosched()
		p.mu.Lock()
		m := len(p.queue)
		p.mu.Unlock()
		if m == n {
			return
		}
		n = m
	}
}

// flush sends what is queued, one pipeline at a time, until nothing is.
// A call's context deadline does not cut a pipeline short: the others'
// replies are in it (the simulator's clock is manual; only a hung Redis
// could hold a pipeline, and the run then stops anyway).
func (p *autoPipe) flush(ctx context.Context) {
	for {
		p.gather()
		p.mu.Lock()
		batch := p.queue
		p.queue = nil
		if len(batch) == 0 {
			p.flushing = false
			p.mu.Unlock()
			return
		}
		p.batches++
		p.calls += int64(len(batch))
		p.mu.Unlock()
		_, _ = p.raw.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for _, c := range batch {
				_ = pipe.Process(ctx, c.cmd)
			}
			return nil
		}) // each command carries its own error
		for _, c := range batch {
			close(c.done)
		}
	}
}
