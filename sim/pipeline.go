package sim

import (
	"context"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// autoPipe is a go-redis hook that sends the ledger scripts (FCALL,
// EVALSHA) and the single reads (HMGET, HGETALL, XRANGE, ...) that the
// daemons' refill loops issue at the same time in shared pipelines: each
// call is still one command that Redis runs atomically on its own, with its
// own reply; only the transport is shared. A caller that finds fewer than
// pipeFlushers pipelines in flight sends at once everything queued (its own
// call with it), and keeps sending what queued meanwhile until nothing is
// left; the others wait for their reply. The simulator's daemons make ~0.94
// million such calls a default day, several at once in most steps (every
// due campaign of every host), and one write and one read per call cost
// pacersim and redis-server more than the scripts' own work.
//
// No caller waits for a pipeline in flight before its call is sent, unless
// pipeFlushers are: with one pipeline in flight at a time, the calls that
// queued during its round trip waited for it, then for their own, and
// Redis stood idle between the two (a default day took ~116 s; with up to
// 8 in flight, ~89 s). Nor does a flusher yield first to let more calls
// queue: a yield let the hosts' arrival generators run before the pipeline
// was sent (one yield a pipeline: ~100 s).
//
// It must be the client's innermost hook (added after every other): it
// does not call the hooks after it. Other commands (writes outside
// scripts, anything that blocks or opens a transaction) go through
// unchanged.
type autoPipe struct {
	raw redis.UniversalClient // the same Redis, without hooks: sends the pipelines

	mu       sync.Mutex
	queue    []*pipeCall
	flushers int   // pipelines being sent, at most pipeFlushers
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
		if p.flushers == pipeFlushers {
			p.mu.Unlock()
			<-c.done // a flusher fills cmd; it is read only after
			return cmd.Err()
		}
		p.flushers++
		p.mu.Unlock()
		p.flush(context.WithoutCancel(ctx))
		<-c.done // another flusher may have taken c and still be sending it
		return cmd.Err()
	}
}

// pipeFlushers is the most pipelines in flight at once, each on a
// connection of its own (pipeRDB's pool is this size).
const pipeFlushers = 8

// flush sends what is queued, one pipeline at a time, until nothing is.
// A call's context deadline does not cut a pipeline short: the others'
// replies are in it (the simulator's clock is manual; only a hung Redis
// could hold a pipeline, and the run then stops anyway).
func (p *autoPipe) flush(ctx context.Context) {
	for {
		p.mu.Lock()
		batch := p.queue
		p.queue = nil
		if len(batch) == 0 {
			p.flushers--
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
