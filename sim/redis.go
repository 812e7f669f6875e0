package sim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisServer is a redis-server child process on a Unix socket in a
// temporary directory. Persistence is off: the simulator measures pacing
// and command counts, not fsync cost.
type RedisServer struct {
	Socket string
	dir    string
	cmd    *exec.Cmd
}

// StartRedis starts bin (a redis-server binary) and waits until it answers.
func StartRedis(ctx context.Context, bin string) (*RedisServer, error) {
	if bin == "" {
		bin = "redis-server"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("redis-server not found (%v): install it with `sudo apt-get install redis-server`, or pass --redis ADDR or --redis-server PATH", err)
	}
	// Unix socket paths are limited to ~104 bytes: keep the directory short.
	dir, err := os.MkdirTemp("", "pacersim-")
	if err != nil {
		return nil, err
	}
	s := &RedisServer{Socket: filepath.Join(dir, "redis.sock"), dir: dir}
	s.cmd = exec.Command(path, "--port", "0", "--unixsocket", s.Socket, "--unixsocketperm", "700",
		"--dir", dir, "--appendonly", "no", "--save", "", "--daemonize", "no",
		"--loglevel", "warning", "--logfile", filepath.Join(dir, "redis.log"))
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("unix", s.Socket)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			s.Stop()
			return nil, fmt.Errorf("redis-server did not listen on %s within 10s: %v\n%s", s.Socket, err, log)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return s, nil
}

// Stop stops the server and removes its directory.
func (s *RedisServer) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			s.cmd.Process.Kill()
			<-done
		}
		s.cmd = nil
	}
	os.RemoveAll(s.dir)
}

// newClient returns a client for addr: a Unix socket path or host:port.
func newClient(addr string) *redis.Client {
	if strings.HasPrefix(addr, "/") || strings.HasPrefix(addr, ".") {
		return redis.NewClient(&redis.Options{Network: "unix", Addr: addr, PoolSize: 64})
	}
	return redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})
}

// errRedisPaused is what every command gets while the scenario has Redis
// paused.
var errRedisPaused = errors.New("sim: redis paused by the fault schedule")

// counter is a go-redis hook that counts every command sent through the
// client, attributes each to the campaign its first key names, and fails
// commands fast while the scenario pauses Redis.
type counter struct {
	total  atomic.Int64
	failed atomic.Int64
	byID   map[string]*atomic.Int64 // fixed before the run; read-only after
	other  atomic.Int64             // commands naming no known campaign
	paused *atomic.Bool
	keyID  func(key string) string
}

func newCounter(ids []string, paused *atomic.Bool, keyID func(string) string) *counter {
	c := &counter{byID: map[string]*atomic.Int64{}, paused: paused, keyID: keyID}
	for _, id := range ids {
		c.byID[id] = new(atomic.Int64)
	}
	return c
}

func (c *counter) count(cmd redis.Cmder) {
	c.total.Add(1)
	for _, a := range cmd.Args()[1:] {
		k, ok := a.(string)
		if !ok {
			continue
		}
		if id := c.keyID(k); id != "" {
			if n, ok := c.byID[id]; ok {
				n.Add(1)
				return
			}
		}
	}
	c.other.Add(1)
}

func (c *counter) campaign(id string) int64 {
	if n, ok := c.byID[id]; ok {
		return n.Load()
	}
	return 0
}

// DialHook implements redis.Hook.
func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if c.paused.Load() {
			c.failed.Add(1)
			cmd.SetErr(errRedisPaused)
			return errRedisPaused
		}
		c.count(cmd)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if c.paused.Load() {
			c.failed.Add(int64(len(cmds)))
			for _, cmd := range cmds {
				cmd.SetErr(errRedisPaused)
			}
			return errRedisPaused
		}
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}

// pacerKeyID returns the campaign a ledger key belongs to:
// pacer:{c/day/shard}:..., pacer:campaign:c, pacer:days:c.
func pacerKeyID(k string) string {
	rest, ok := strings.CutPrefix(k, "pacer:")
	if !ok {
		return ""
	}
	if tag, ok := strings.CutPrefix(rest, "{"); ok {
		id, _, _ := strings.Cut(tag, "/")
		return id
	}
	if id, ok := strings.CutPrefix(rest, "campaign:"); ok {
		return id
	}
	if id, ok := strings.CutPrefix(rest, "days:"); ok {
		return id
	}
	return ""
}

// baselineKeyID returns the campaign of a baseline key: sim:lua:{c},
// sim:batch:{c}:N.
func baselineKeyID(k string) string {
	_, tag, ok := strings.Cut(k, "{")
	if !ok || !strings.HasPrefix(k, "sim:") {
		return ""
	}
	id, _, _ := strings.Cut(tag, "}")
	return id
}
