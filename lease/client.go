package lease

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/pacer/pacer/internal/redisretry"
	"github.com/redis/go-redis/v9"
)

// ClientOptions are what the ledger's connections need besides the
// addresses: credentials and TLS. The zero value connects in clear without
// AUTH, as a Redis on a private socket allows. The caller (cmd/pacerd,
// cmd/pacerctl) reads secrets and certificate files; this package never
// does.
type ClientOptions struct {
	// Username and Password authenticate every connection (AUTH, or an ACL
	// user with Username). A redis:// URL may carry them instead; giving them
	// in both places is an error, so one of them never silently wins.
	Username, Password string
	// SentinelUsername and SentinelPassword authenticate to the Sentinels of
	// a sentinel:// address, which keep their own ACL (sentinel's
	// requirepass / user lines); empty: the Sentinels need no AUTH.
	SentinelUsername, SentinelPassword string
	// TLS, if not nil, wraps every TCP connection (to the master, replicas,
	// Cluster nodes and Sentinels) in TLS with this configuration: its
	// RootCAs verify the server, its Certificates are the client's. A
	// rediss:// address turns TLS on with the system's roots when TLS is nil.
	// An empty ServerName is taken from each address's host, so one config
	// serves every node of a Cluster.
	TLS *tls.Config
	// DialTimeout bounds one connection attempt; zero keeps go-redis's (5s).
	DialTimeout time.Duration
	// PoolSize is the most connections kept to each node; zero keeps
	// go-redis's (10 per CPU). The simulator, which runs a fleet in one
	// process, raises it.
	PoolSize int
	// Hooks are added to the client ahead of the ledger's retry hook
	// (redisretry.Reads), so they see each command once however often it is
	// retried, and may fail it without a retry (the simulator counts and
	// pauses Redis this way).
	Hooks []redis.Hook
}

// Target is a parsed list of ledger addresses: what NewClient connects to.
type Target struct {
	// Kind is "single" (one host:port), "unix" (a socket path), "cluster"
	// (several host:port seeds) or "sentinel".
	Kind string
	// Addrs are host:port addresses (the Sentinels' for "sentinel"), or the
	// socket path for "unix".
	Addrs []string
	// MasterName is the Sentinel master's name.
	MasterName string
	// Username and Password came from a URL's user info.
	Username, Password string
	// TLS is set by a rediss:// address.
	TLS bool
}

// ParseTarget parses the ledger's addresses: one host:port, one Unix socket
// path (starting with / or .), one sentinel://master-name@host:port,...
// address, several host:port Cluster seeds, or URLs:
// redis://[user[:password]@]host:port, rediss://… (TLS),
// redis+cluster://… and rediss+cluster://… (a Redis Cluster: one seed is
// enough) and unix://[user[:password]@]/path. Several URLs are Cluster seeds
// and must agree on scheme and credentials. Errors never contain a password.
func ParseTarget(addrs []string) (Target, error) {
	switch {
	case len(addrs) == 0:
		return Target{}, errors.New("at least one address is needed")
	case len(addrs) == 1 && IsSentinel(addrs[0]):
		opt, err := ParseSentinel(addrs[0])
		if err != nil {
			return Target{}, err
		}
		return Target{Kind: "sentinel", Addrs: opt.SentinelAddrs, MasterName: opt.MasterName}, nil
	}
	if len(addrs) > 1 {
		for _, a := range addrs {
			if IsSocketPath(a) || strings.HasPrefix(a, "unix:") {
				return Target{}, fmt.Errorf("%q: a Unix socket path must be the only address (several addresses are Cluster seeds, host:port)", Redact(a))
			}
		}
	}
	var t Target
	seen := make(map[string]bool, len(addrs))
	for i, a := range addrs {
		one, err := parseOne(a)
		if err != nil {
			return Target{}, err
		}
		if i == 0 {
			t = one
			t.Addrs = nil
		} else if one.Kind != t.Kind || one.TLS != t.TLS || one.Username != t.Username || one.Password != t.Password {
			return Target{}, fmt.Errorf("%q: every Cluster seed must use the same scheme and credentials", Redact(a))
		}
		key := one.Addrs[0]
		if seen[key] {
			return Target{}, fmt.Errorf("%q is listed twice", Redact(a))
		}
		seen[key] = true
		t.Addrs = append(t.Addrs, key)
	}
	if len(t.Addrs) > 1 {
		t.Kind = "cluster"
	}
	return t, nil
}

// maxSocketPath is the longest Unix socket path Linux accepts.
const maxSocketPath = 107

// IsSocketPath reports whether a ledger address is a Unix socket path
// rather than host:port or a URL: it starts with / or . (a unix:// URL is
// a socket too, see ParseTarget).
func IsSocketPath(addr string) bool {
	return strings.HasPrefix(addr, "/") || strings.HasPrefix(addr, ".")
}

func parseOne(a string) (Target, error) {
	if IsSocketPath(a) {
		if len(a) > maxSocketPath {
			return Target{}, fmt.Errorf("%q: path is %d bytes; Unix socket paths are limited to %d", a, len(a), maxSocketPath)
		}
		return Target{Kind: "unix", Addrs: []string{a}}, nil
	}
	if !strings.Contains(a, "://") {
		if err := checkHostPort(a); err != nil {
			return Target{}, err
		}
		return Target{Kind: "single", Addrs: []string{a}}, nil
	}
	shown := Redact(a)
	u, err := url.Parse(a)
	if err != nil {
		return Target{}, fmt.Errorf("%q: not a URL: want redis://[user[:password]@]host:port, rediss://… or unix:///path", shown)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return Target{}, fmt.Errorf("%q: no query or fragment allowed: put credentials in the URL's user info or in the config's redis_auth", shown)
	}
	t := Target{}
	if u.User != nil {
		t.Username = u.User.Username()
		t.Password, _ = u.User.Password()
	}
	switch u.Scheme {
	case "redis", "rediss", "redis+cluster", "rediss+cluster":
		// redis+cluster: a Cluster, even from one seed (go-redis's Cluster
		// client finds the other nodes from it); a plain host:port would be
		// taken for one server and fail with MOVED.
		t.Kind, t.TLS = "single", strings.HasPrefix(u.Scheme, "rediss")
		if strings.HasSuffix(u.Scheme, "+cluster") {
			t.Kind = "cluster"
		}
		if u.Path != "" && u.Path != "/" && u.Path != "/0" {
			return Target{}, fmt.Errorf("%q: database %q: the ledger uses database 0 (Cluster has no other)", shown, strings.TrimPrefix(u.Path, "/"))
		}
		if err := checkHostPort(u.Host); err != nil {
			return Target{}, fmt.Errorf("%q: %w", shown, err)
		}
		t.Addrs = []string{u.Host}
	case "unix":
		if u.Host != "" || u.Path == "" {
			return Target{}, fmt.Errorf("%q: want unix:///absolute/path (three slashes)", shown)
		}
		if len(u.Path) > maxSocketPath {
			return Target{}, fmt.Errorf("%q: path is %d bytes; Unix socket paths are limited to %d", shown, len(u.Path), maxSocketPath)
		}
		t.Kind, t.Addrs = "unix", []string{u.Path}
	default:
		return Target{}, fmt.Errorf("%q: scheme %q: want redis, rediss, redis+cluster, rediss+cluster, unix or sentinel", shown, u.Scheme)
	}
	return t, nil
}

func checkHostPort(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil || host == "" {
		return fmt.Errorf("%q: want host:port, a URL (redis://, rediss://, unix://) or a Unix socket path starting with / or .", a)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%q: port %q: want 1 to 65535", a, port)
	}
	return nil
}

// Redact returns a Redis address fit for logs and errors: a URL's password
// is replaced by "xxxxx". Other addresses are returned unchanged.
func Redact(addr string) string {
	u, err := url.Parse(addr)
	if err != nil || u.User == nil {
		if err != nil && strings.Contains(addr, "@") {
			return "(unparsable address with user info)"
		}
		return addr
	}
	if _, ok := u.User.Password(); !ok {
		return addr
	}
	return u.Redacted()
}

// RedactAll redacts every address of a list (see Redact).
func RedactAll(addrs []string) []string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = Redact(a)
	}
	return out
}

// NewClient returns a Redis client for the ledger's addresses (see
// ParseTarget), connecting without AUTH or TLS unless a URL asks for them.
// See NewClientWith.
func NewClient(addrs []string) (redis.UniversalClient, error) {
	return NewClientWith(addrs, ClientOptions{})
}

// NewClientWith returns a Redis client for the ledger's addresses with the
// credentials and TLS of opt. Its calls honour their context's deadline (the
// daemon's ledger timeout), also on a connection that hangs because the
// network to Redis is cut; without that, go-redis would wait out its own
// read timeout and retries. go-redis's own retries are off: a plain command
// whose reply was lost must not run twice; the ledger retries its scripts
// itself, which are idempotent by lease, move or op id, and the client
// retries only commands that are safe to send twice (redisretry.Reads).
//
// Credentials are checked on the first call, not here: see IsAuthError.
func NewClientWith(addrs []string, opt ClientOptions) (redis.UniversalClient, error) {
	rdb, err := newClient(addrs, opt)
	if err != nil {
		return nil, err
	}
	for _, h := range opt.Hooks {
		rdb.AddHook(h)
	}
	rdb.AddHook(redisretry.Reads{})
	return rdb, nil
}

func newClient(addrs []string, opt ClientOptions) (redis.UniversalClient, error) {
	t, err := ParseTarget(addrs)
	if err != nil {
		return nil, err
	}
	user, pass := opt.Username, opt.Password
	if t.Username != "" || t.Password != "" {
		if opt.Username != "" || opt.Password != "" {
			return nil, errors.New("Redis credentials given twice: in the address's URL and in redis_auth (or the environment); give them once")
		}
		user, pass = t.Username, t.Password
	}
	tlsCfg := opt.TLS
	if t.TLS && tlsCfg == nil {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if tlsCfg != nil && t.Kind == "unix" {
		return nil, errors.New("TLS is for TCP: a Unix socket path cannot use it (drop redis_tls or use host:port)")
	}
	switch t.Kind {
	case "sentinel":
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: t.MasterName, SentinelAddrs: t.Addrs,
			Username: user, Password: pass,
			SentinelUsername: opt.SentinelUsername, SentinelPassword: opt.SentinelPassword,
			TLSConfig: tlsCfg, DialTimeout: opt.DialTimeout, PoolSize: opt.PoolSize,
			ContextTimeoutEnabled: true, MaxRetries: -1,
		}), nil
	case "cluster":
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: t.Addrs, Username: user, Password: pass, TLSConfig: tlsCfg, DialTimeout: opt.DialTimeout,
			PoolSize: opt.PoolSize, ContextTimeoutEnabled: true, MaxRetries: -1,
		}), nil
	}
	network := "tcp"
	if t.Kind == "unix" {
		network = "unix"
	}
	return redis.NewClient(&redis.Options{
		Network: network, Addr: t.Addrs[0], Username: user, Password: pass, TLSConfig: tlsCfg,
		DialTimeout: opt.DialTimeout, PoolSize: opt.PoolSize, ContextTimeoutEnabled: true, MaxRetries: -1,
	}), nil
}

// ErrAuth marks a ledger that refused this client's credentials, or whose
// TLS certificate this client refused: a configuration error that waiting
// does not fix, unlike a Redis that is down.
var ErrAuth = errors.New("lease: Redis refused the credentials or the TLS handshake failed")

// IsAuthError reports whether err is Redis refusing authentication (NOAUTH,
// WRONGPASS, an AUTH without a configured password) or a failed TLS
// handshake (unknown authority, wrong name, a client certificate refused):
// errors a restart with the same configuration would meet again.
func IsAuthError(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrAuth) {
		return true
	}
	var (
		certErr *tls.CertificateVerificationError
		alert   tls.AlertError
	)
	if errors.As(err, &certErr) || errors.As(err, &alert) {
		return true
	}
	msg := err.Error()
	for _, p := range []string{"NOAUTH", "WRONGPASS", "NOPERM", "ERR AUTH", "ERR Client sent AUTH", "invalid password", "invalid username-password pair",
		"tls: ", "x509: ", "remote error: tls"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// CheckAuth returns err wrapped with ErrAuth when it is an authentication or
// TLS failure (IsAuthError), else err unchanged.
func CheckAuth(err error) error {
	if err == nil || errors.Is(err, ErrAuth) || !IsAuthError(err) {
		return err
	}
	return fmt.Errorf("%w: %v", ErrAuth, err)
}
