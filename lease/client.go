package lease

import (
	"errors"
	"strings"

	"github.com/pacer/pacer/internal/redisretry"
	"github.com/redis/go-redis/v9"
)

// NewClient returns a Redis client for the ledger's addresses: one host:port,
// one Unix socket path (starting with / or .), or several host:port seeds of a
// Redis Cluster. Its calls honour their context's deadline (the daemon's
// ledger timeout), also on a connection that hangs because the network to
// Redis is cut; without that, go-redis would wait out its own read timeout and
// retries. go-redis's own retries are off: a plain command whose reply was
// lost must not run twice; the ledger retries its scripts itself, which are
// idempotent by lease, move or op id, and the client retries only commands
// that are safe to send twice (redisretry.Reads).
func NewClient(addrs []string) (redis.UniversalClient, error) {
	rdb, err := newClient(addrs)
	if err != nil {
		return nil, err
	}
	rdb.AddHook(redisretry.Reads{})
	return rdb, nil
}

func newClient(addrs []string) (redis.UniversalClient, error) {
	switch {
	case len(addrs) == 0:
		return nil, errors.New("no Redis address given")
	case len(addrs) == 1 && IsSentinel(addrs[0]):
		return NewSentinelClient(addrs[0])
	case len(addrs) == 1 && (strings.HasPrefix(addrs[0], "/") || strings.HasPrefix(addrs[0], ".")):
		return redis.NewClient(&redis.Options{Network: "unix", Addr: addrs[0], ContextTimeoutEnabled: true, MaxRetries: -1}), nil
	case len(addrs) == 1:
		return redis.NewClient(&redis.Options{Addr: addrs[0], ContextTimeoutEnabled: true, MaxRetries: -1}), nil
	}
	for _, a := range addrs {
		if strings.HasPrefix(a, "/") || strings.HasPrefix(a, ".") {
			return nil, errors.New("a Unix socket path cannot be a Cluster seed: give one path, or host:port seeds")
		}
	}
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, MaxRetries: -1}), nil
}
