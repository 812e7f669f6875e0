package lease

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// SentinelScheme starts a Redis address that names a master through Redis
// Sentinel: sentinel://master-name@host:port,host:port.
const SentinelScheme = "sentinel://"

// IsSentinel reports whether a Redis address is a sentinel:// address.
func IsSentinel(addr string) bool { return strings.HasPrefix(addr, SentinelScheme) }

// ParseSentinel parses sentinel://master-name@host:port[,host:port...] into
// the options of go-redis's failover client: it asks the Sentinels for the
// current master and follows failovers. The calls of the client honour their
// context's deadline, as NewClient's do.
func ParseSentinel(addr string) (*redis.FailoverOptions, error) {
	rest, ok := strings.CutPrefix(addr, SentinelScheme)
	if !ok {
		return nil, fmt.Errorf("%q: want %smaster-name@host:port[,host:port...]", addr, SentinelScheme)
	}
	name, hosts, ok := strings.Cut(rest, "@")
	if !ok || name == "" {
		return nil, fmt.Errorf("%q: no master name: want %smaster-name@host:port[,host:port...]", addr, SentinelScheme)
	}
	if strings.ContainsAny(name, "/?#:") {
		return nil, fmt.Errorf("%q: master name %q: no '/', '?', '#' or ':' allowed", addr, name)
	}
	opt := &redis.FailoverOptions{MasterName: name, ContextTimeoutEnabled: true, MaxRetries: -1}
	seen := map[string]bool{}
	for _, h := range strings.Split(hosts, ",") {
		h = strings.TrimSpace(h)
		host, port, err := net.SplitHostPort(h)
		if err != nil || host == "" {
			return nil, fmt.Errorf("%q: sentinel %q: want host:port", addr, h)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return nil, fmt.Errorf("%q: sentinel %q: port: want 1 to 65535", addr, h)
		}
		if seen[h] {
			return nil, fmt.Errorf("%q: sentinel %q listed twice", addr, h)
		}
		seen[h] = true
		opt.SentinelAddrs = append(opt.SentinelAddrs, h)
	}
	if len(opt.SentinelAddrs) == 0 {
		return nil, errors.New("no sentinel addresses")
	}
	return opt, nil
}

// NewSentinelClient returns a failover client for a sentinel:// address
// (see ParseSentinel). NewClient calls it for such an address.
func NewSentinelClient(addr string) (redis.UniversalClient, error) {
	opt, err := ParseSentinel(addr)
	if err != nil {
		return nil, err
	}
	return redis.NewFailoverClient(opt), nil
}
