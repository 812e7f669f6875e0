// Package redistest starts real redis-server processes for tests, on Unix
// sockets in temporary directories, so that no test depends on a server
// already running on a fixed port.
package redistest

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/pacer/pacer/internal/redisproc"
	"github.com/pacer/pacer/internal/redisretry"
	"github.com/redis/go-redis/v9"
)

// Server is a redis-server for one test. Persistence (AOF, fsync always) is
// on, as production runs it, so Restart keeps every acknowledged write.
type Server struct {
	*redisproc.Server
	tb testing.TB
}

// Start starts a redis-server for the test and stops it at cleanup. Extra
// arguments are passed as redis-server options ("--maxmemory", "1mb"). A
// missing redis-server fails the test with a message saying how to get it.
func Start(tb testing.TB, extra ...string) *Server {
	tb.Helper()
	return StartWith(tb, redisproc.Options{Persistent: true, Extra: extra})
}

// StartWith starts a redis-server run as opt says (a replica, another fsync
// policy, a config file) and stops it at cleanup.
func StartWith(tb testing.TB, opt redisproc.Options) *Server {
	tb.Helper()
	s, err := redisproc.Start(context.Background(), opt)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Stop)
	return &Server{Server: s, tb: tb}
}

// Client returns a new client for the server, closed at cleanup. Like the
// daemon's (lease.NewClient), its calls honour their context's deadline and
// it does not retry (the ledger retries its idempotent scripts itself).
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: s.Socket, ContextTimeoutEnabled: true, MaxRetries: -1})
	c.AddHook(redisretry.Reads{})
	s.tb.Cleanup(func() { c.Close() })
	return c
}

// Restart kills the server and starts it again on the same socket and data.
func (s *Server) Restart() {
	s.tb.Helper()
	if err := s.Server.Restart(context.Background()); err != nil {
		s.tb.Fatal(err)
	}
}

// Snapshot DUMPs keys (those that exist), so that Restore can put them back as
// they were: a Redis restarted from an older AOF or snapshot, or a lagging
// replica promoted, in one shard's keys.
func (s *Server) Snapshot(keys ...string) map[string]string {
	s.tb.Helper()
	c := s.Client()
	out := map[string]string{}
	for _, k := range keys {
		v, err := c.Dump(context.Background(), k).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			s.tb.Fatal(err)
		}
		out[k] = v
	}
	return out
}

// SnapshotAll is Snapshot of every key there is: a backup of the whole
// server, for RestoreAll.
func (s *Server) SnapshotAll() map[string]string {
	s.tb.Helper()
	return s.Snapshot(s.keys()...)
}

// RestoreAll puts the whole server back as SnapshotAll saw it, as a Redis
// restarted from that backup: keys made since are deleted, keys deleted
// since come back.
func (s *Server) RestoreAll(snap map[string]string) {
	s.tb.Helper()
	keys := s.keys()
	for k := range snap {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	s.Restore(snap, keys...)
}

func (s *Server) keys() []string {
	s.tb.Helper()
	keys, err := s.Client().Keys(context.Background(), "*").Result()
	if err != nil {
		s.tb.Fatal(err)
	}
	return keys
}

// Restore puts keys back as Snapshot saw them; keys absent then are deleted.
func (s *Server) Restore(snap map[string]string, keys ...string) {
	s.tb.Helper()
	c := s.Client()
	for _, k := range keys {
		if err := c.Del(context.Background(), k).Err(); err != nil {
			s.tb.Fatal(err)
		}
		if v, ok := snap[k]; ok {
			if err := c.RestoreReplace(context.Background(), k, 0, v).Err(); err != nil {
				s.tb.Fatal(err)
			}
		}
	}
}
