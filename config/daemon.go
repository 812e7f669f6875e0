// Package config owns pacer's configuration files: pacerd's YAML config and
// the pacing-curve files. It parses and validates bytes it is handed (or the
// files of an fs.FS), fills defaults (the daemon's settings take
// daemon.DefaultConfig's), and reports problems by key and line,
// so an operator can fix a config file from the error alone. It never reads
// flags, the environment or a path of its own choosing.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/pacer/pacer/broadcast"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/transport"
	"gopkg.in/yaml.v3"
)

// Daemon is pacerd's configuration file. Every key has a default (see
// DefaultDaemon), so an empty file is a valid config; a key the struct does
// not know is an error, so a typo never silently leaves a default in place.
// Command-line overrides are applied by cmd/pacerd, not here.
//
// The daemon's own settings (holder, the lease section, the refill loop's
// timings, the auction-id memory, the unknown-campaign cache) are a
// daemon.Config, decoded straight into it by its yaml tags: their defaults
// and checks are daemon.Config's. This file keeps what only a process has:
// the socket, addresses and secrets of Redis, etcd and NATS, the admin
// listener, logging, and the directories.
type Daemon struct {
	// Socket is the Unix socket bidders connect to.
	Socket string `yaml:"socket"`
	// SocketMode is the socket file's permission bits, written in octal.
	SocketMode FileMode `yaml:"socket_mode"`
	// SocketServer is how the bidder socket serves connections:
	// "epoll" (event loops on epoll; Linux), "hybrid" (the epoll loops,
	// reading and writing a busy wake-up's connections through io_uring;
	// Linux) or "goroutines" (one per connection). Empty means the
	// platform's default (transport.DefaultSocketServer on Linux). All
	// apply every limit below. "uring" was removed: Validate says so.
	SocketServer string `yaml:"socket_server"`
	// SocketLoops is how many event loops the epoll and hybrid
	// servers run; 0 means transport.DefaultLoops() (one per two cores).
	SocketLoops int `yaml:"socket_loops"`
	// MaxClients caps the bidder socket's open connections.
	MaxClients int `yaml:"max_clients"`
	// ClientIdleTimeout closes a bidder connection silent for this long
	// between requests; 0 never does.
	ClientIdleTimeout time.Duration `yaml:"client_idle_timeout"`
	// ClientReadTimeout closes a bidder connection whose request has not
	// fully arrived this long after its first bytes; 0 never does.
	ClientReadTimeout time.Duration `yaml:"client_read_timeout"`
	// ClientWriteTimeout closes a bidder connection that has not read its
	// replies for this long; 0 never does.
	ClientWriteTimeout time.Duration `yaml:"client_write_timeout"`
	// MaxBufferedBytes is the buffer budget all bidder connections share:
	// read buffers grown past 4 KB, MULTI queues and unread replies. What
	// does not fit is refused with an error naming the key.
	MaxBufferedBytes int64 `yaml:"max_buffered_bytes"`
	// AllowedUIDs and AllowedGIDs, when either is non-empty, admit only
	// peers (by SO_PEERCRED) with a listed uid or gid.
	AllowedUIDs []int64 `yaml:"allowed_uids"`
	AllowedGIDs []int64 `yaml:"allowed_gids"`
	// Redis lists the ledger's addresses: one host:port, one Unix socket
	// path (starting with / or .), one sentinel://master-name@host:port,...
	// address, or several host:port Cluster seeds.
	Redis []string `yaml:"redis"`
	// Etcd lists etcd endpoints for the reconciler election; empty means no
	// election (this daemon never runs the reconciler).
	Etcd []string `yaml:"etcd"`
	// Election tunes the etcd session of the reconciler election.
	Election Election `yaml:"election"`
	// NATS is the NATS URL (or comma-separated URLs) for broadcasts; empty
	// means none (exhaustion is learnt from the ledger, more slowly).
	NATS string `yaml:"nats"`
	// Admin is where the metrics and health listener listens: a loopback
	// host:port, or a Unix socket ("unix:/run/pacer/admin.sock" or an
	// absolute path) that only the daemon's user can open. Empty disables it.
	Admin string `yaml:"admin"`
	// AdminMaxConns caps the admin listener's open connections.
	AdminMaxConns int `yaml:"admin_max_conns"`
	// AdminIdleTimeout closes an admin connection idle for this long.
	AdminIdleTimeout time.Duration `yaml:"admin_idle_timeout"`
	// CurvesDir holds the pacing-curve files (*.yaml).
	CurvesDir string `yaml:"curves_dir"`
	// StateDir is where the daemon remembers campaigns across restarts.
	StateDir string `yaml:"state_dir"`
	// MaxAmountMicros caps one SPEND or REFUND.
	MaxAmountMicros int64 `yaml:"max_amount_micros"`
	// Config holds the daemon's settings, at the file's top level and in its
	// lease section. Holder empty means the host name, which the caller
	// fills in. The file writes "never" for lease.standing_idle,
	// lease.sparse_wait and campaign_idle as 0s; ParseDaemon turns that into
	// daemon.Never.
	daemon.Config `yaml:",inline"`
	Log           Log    `yaml:"log"`
	Ledger        Ledger `yaml:"ledger"`
	// RedisAuth and RedisTLS secure the ledger's connections.
	RedisAuth RedisAuth `yaml:"redis_auth"`
	RedisTLS  TLS       `yaml:"redis_tls"`
	// EtcdAuth and EtcdTLS secure the election's connections.
	EtcdAuth EtcdAuth `yaml:"etcd_auth"`
	EtcdTLS  TLS      `yaml:"etcd_tls"`
	// NATSAuth and NATSTLS secure the broadcasts' connection; Broadcast
	// authenticates the events themselves.
	NATSAuth  NATSAuth  `yaml:"nats_auth"`
	NATSTLS   TLS       `yaml:"nats_tls"`
	Broadcast Broadcast `yaml:"broadcast"`
}

// Log is the logging section of Daemon.
type Log struct {
	Format string `yaml:"format"` // json | console
	Level  string `yaml:"level"`  // debug | info | warn | error
}

// FileMode is a file's permission bits, written in YAML in octal ("0660").
type FileMode os.FileMode

// String returns the mode in the octal form the config file uses.
func (m FileMode) String() string { return fmt.Sprintf("%04o", uint32(m)) }

// MarshalYAML writes the mode as an octal string.
func (m FileMode) MarshalYAML() (any, error) { return m.String(), nil }

// UnmarshalYAML reads an octal mode, quoted ("0660") or not (0660).
func (m *FileMode) UnmarshalYAML(n *yaml.Node) error {
	v, err := parseFileMode(n)
	if err != nil {
		return err
	}
	*m = v
	return nil
}

func parseFileMode(n *yaml.Node) (FileMode, error) {
	if n.Kind != yaml.ScalarNode {
		return 0, errors.New(`want an octal mode such as "0660"`)
	}
	// The node's text, not its resolved value: unquoted 0660 is still octal
	// to a reader, whatever YAML 1.1 or 1.2 would make of it.
	s := strings.TrimPrefix(n.Value, "0o")
	v, err := strconv.ParseUint(s, 8, 32)
	if err != nil || s == "" || v > 0o777 {
		return 0, fmt.Errorf(`%q is not an octal mode such as "0660" (at most 0777)`, n.Value)
	}
	return FileMode(v), nil
}

// DefaultDaemon returns the configuration of an empty config file. Holder is
// empty: the caller fills in the host name.
func DefaultDaemon() Daemon {
	return Daemon{
		Socket:          "/run/pacer/pacer.sock",
		SocketMode:      0o660,
		Redis:           []string{"127.0.0.1:6379"},
		Etcd:            []string{},
		Election:        Election{TTL: 15 * time.Second},
		Admin:           "127.0.0.1:9464",
		CurvesDir:       "/etc/pacer/curves",
		StateDir:        "/var/lib/pacer",
		MaxAmountMicros: 100_000_000,
		Config:          daemon.DefaultConfig(),
		Log:             Log{Format: "json", Level: "info"},
		Ledger:          Ledger{Durability: "fsync", CheckInterval: 10 * time.Second},

		// The bidder socket's limits (transport.ServerConfig's defaults)
		// and the admin listener's.
		MaxClients:         10_000,
		ClientIdleTimeout:  5 * time.Minute,
		ClientReadTimeout:  10 * time.Second,
		ClientWriteTimeout: 10 * time.Second,
		MaxBufferedBytes:   transport.DefaultMaxBufferedBytes,
		AllowedUIDs:        []int64{},
		AllowedGIDs:        []int64{},
		AdminMaxConns:      64,
		AdminIdleTimeout:   time.Minute,
		Broadcast:          Broadcast{MaxAge: 10 * time.Second},
	}
}

// maxSocketPath is the longest Unix socket path Linux accepts (sun_path is
// 108 bytes including the terminating NUL).
const maxSocketPath = 107

// minDedupMemory and maxDedupMemory bound dedup_memory_bytes in a config
// file, inside the daemon's own bounds: below 1 MiB a busy daemon would
// remember its auction ids for well under a second; above 64 GiB it is surely
// a typo. (The daemon accepts less, for tests of its eviction.)
const (
	minDedupMemory = 1 << 20
	maxDedupMemory = 64 << 30
)

// maxClients bounds max_clients: each connection is a file descriptor.
const maxClients = 1_000_000

// minBufferedBytes and maxBufferedBytes bound max_buffered_bytes: below
// 1 MiB one MULTI at its own cap (1 MiB) could never be queued; above
// 64 GiB it is surely a typo.
const (
	minBufferedBytes = 1 << 20
	maxBufferedBytes = 64 << 30
)

// maxSocketLoops bounds socket_loops: more loops than cores only cost.
const maxSocketLoops = 1024

// AdminUnixPath reports whether an admin address names a Unix socket,
// "unix:/path" or "/path", and returns the path.
func AdminUnixPath(addr string) (string, bool) {
	if p, ok := strings.CutPrefix(addr, "unix:"); ok {
		return p, true
	}
	return addr, strings.HasPrefix(addr, "/")
}

// ParseDaemon parses a pacerd config file: keys absent from data keep their
// DefaultDaemon value. Unknown keys, values of the wrong type and settings
// that do not make sense together are errors; all the problems found are
// reported at once, one per line, each naming its key.
func ParseDaemon(data []byte) (Daemon, error) {
	d := DefaultDaemon()
	if err := decodeStrict(data, &d); err != nil {
		return Daemon{}, err
	}
	errs := d.fileNever()
	if err := d.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return Daemon{}, err
	}
	return d, nil
}

// fileNever maps the file's 0s ("never") for lease.standing_idle,
// lease.sparse_wait and campaign_idle onto daemon.Never (a zero daemon.Config field means its
// default), and refuses a negative duration there, which the file has no use
// for. It runs once, on what the file said: after it, the fields hold the
// daemon's meaning.
func (d *Daemon) fileNever() []error {
	var errs []error
	for _, f := range []struct {
		key, never string
		v          *time.Duration
	}{
		{"lease.standing_idle", "no standing leases", &d.StandingIdle},
		{"lease.sparse_wait", "a sparse campaign's SPENDs never wait for the ledger", &d.SparseWait},
		{"campaign_idle", "never drop an unused campaign", &d.CampaignIdle},
	} {
		switch {
		case *f.v < 0:
			errs = append(errs, fmt.Errorf("%s: %v: must be 0 (%s) or positive", f.key, *f.v, f.never))
		case *f.v == 0:
			*f.v = daemon.Never
		}
	}
	return errs
}

// Validate reports every problem in d, joined, or nil: the file's own keys
// checked here, the daemon's by daemon.Config.Validate. ParseDaemon calls it;
// cmd/pacerd calls it again after applying flag overrides.
func (d Daemon) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	d.validateSocket(bad)
	d.validateLinks(bad)
	d.validateAdmin(bad)
	if d.CurvesDir == "" {
		bad("curves_dir: must not be empty")
	}
	if d.StateDir == "" {
		bad("state_dir: must not be empty")
	}
	if d.MaxAmountMicros <= 0 || d.MaxAmountMicros > lease.MaxBudgetMicros {
		bad("max_amount_micros: %d: want 1 to %d", d.MaxAmountMicros, lease.MaxBudgetMicros)
	}
	// The file's tighter bound on dedup_memory_bytes replaces the daemon's.
	fileDedup := d.DedupMemoryBytes < minDedupMemory || d.DedupMemoryBytes > maxDedupMemory
	if fileDedup {
		bad("dedup_memory_bytes: %d: want %d (1 MiB) to %d (64 GiB)", d.DedupMemoryBytes, int64(minDedupMemory), int64(maxDedupMemory))
	}
	if err := d.Config.Validate(); err != nil {
		for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
			var ce *daemon.ConfigError
			if errors.As(e, &ce) && ce.Key == "dedup_memory_bytes" && fileDedup {
				continue
			}
			errs = append(errs, e)
		}
	}

	d.Ledger.validate(bad)

	switch d.Log.Format {
	case "json", "console":
	default:
		bad("log.format: %q: want json or console", d.Log.Format)
	}
	switch d.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level: %q: want debug, info, warn or error", d.Log.Level)
	}
	return errors.Join(errs...)
}

// validateSocket checks the bidder socket's keys and limits.
func (d Daemon) validateSocket(bad func(string, ...any)) {
	switch {
	case d.Socket == "":
		bad("socket: must not be empty")
	case len(d.Socket) > maxSocketPath:
		bad("socket: path is %d bytes; Unix socket paths are limited to %d", len(d.Socket), maxSocketPath)
	}
	if _, err := transport.ParseSocketServer(d.SocketServer); err != nil {
		bad("socket_server: %v", strings.TrimPrefix(err.Error(), "transport: "))
	}
	if d.SocketLoops < 0 || d.SocketLoops > maxSocketLoops {
		bad("socket_loops: %d: want 0 (the default) to %d", d.SocketLoops, maxSocketLoops)
	}
	if d.SocketMode&0o600 != 0o600 || d.SocketMode > 0o777 {
		bad("socket_mode: %s must give the owner read and write (at least 0600) and stay within 0777", d.SocketMode)
	}
	if d.MaxClients < 1 || d.MaxClients > maxClients {
		bad("max_clients: %d: want 1 to %d", d.MaxClients, maxClients)
	}
	if d.MaxBufferedBytes < minBufferedBytes || d.MaxBufferedBytes > maxBufferedBytes {
		bad("max_buffered_bytes: %d: want %d (1 MiB) to %d (64 GiB)", d.MaxBufferedBytes, int64(minBufferedBytes), int64(maxBufferedBytes))
	}
	for _, kv := range []struct {
		key string
		v   time.Duration
	}{
		{"client_idle_timeout", d.ClientIdleTimeout}, {"client_read_timeout", d.ClientReadTimeout},
		{"client_write_timeout", d.ClientWriteTimeout}, {"admin_idle_timeout", d.AdminIdleTimeout},
	} {
		if kv.v < 0 {
			bad("%s: %v: want 0 (never) or a positive duration", kv.key, kv.v)
		}
	}
	checkIDs := func(key string, ids []int64) {
		for i, id := range ids {
			// (uid_t)-1 means "no change" to chown, never a real user.
			if id < 0 || id >= 1<<32-1 {
				bad("%s[%d]: %d is not a uid or gid", key, i, id)
			}
		}
	}
	checkIDs("allowed_uids", d.AllowedUIDs)
	checkIDs("allowed_gids", d.AllowedGIDs)
}

// validateLinks checks the Redis, etcd and NATS addresses and their
// credentials and TLS settings. No error shows a password.
func (d Daemon) validateLinks(bad func(string, ...any)) {
	if err := CheckRedis(d.Redis); err != nil {
		bad("redis: %v", err)
	}
	for i, e := range d.Etcd {
		// Redacted: a password in the URL must not reach an error message.
		if err := checkEndpoint(lease.Redact(e), "http", "https"); err != nil {
			bad("etcd[%d]: %v", i, err)
		} else if strings.Contains(e, "@") {
			bad("etcd[%d]: no credentials in an endpoint: use etcd_auth", i)
		}
	}
	if d.NATS != "" {
		for _, u := range strings.Split(d.NATS, ",") {
			// Redacted: a password in the URL must not reach an error message.
			if err := checkURL(broadcast.RedactURLs(strings.TrimSpace(u)), "nats", "tls", "ws", "wss"); err != nil {
				bad("nats: %v", err)
			}
		}
	}
	if t, err := lease.ParseTarget(d.Redis); err == nil && (t.Username != "" || t.Password != "") &&
		(d.RedisAuth.Username != "" || d.RedisAuth.PasswordFile != "") {
		bad("redis_auth: a redis URL carries credentials too; give them once")
	}
	if d.RedisAuth.SentinelPasswordFile != "" && !(len(d.Redis) == 1 && lease.IsSentinel(d.Redis[0])) {
		bad("redis_auth.sentinel_password_file: only for a sentinel:// address")
	}
	if (d.EtcdAuth.Username == "") != (d.EtcdAuth.PasswordFile == "") {
		bad("etcd_auth: username and password_file go together")
	}
	if d.EtcdTLS.Enabled {
		for i, e := range d.Etcd {
			if strings.HasPrefix(e, "http://") {
				bad("etcd[%d]: %q is http:// but etcd_tls is enabled: write https://", i, e)
			}
		}
	}
	d.RedisTLS.validate("redis_tls", bad)
	d.EtcdTLS.validate("etcd_tls", bad)
	d.NATSTLS.validate("nats_tls", bad)
	d.NATSAuth.validate(bad)
	d.Election.validate(bad)
}

// validateAdmin checks the broadcast and admin listener keys.
func (d Daemon) validateAdmin(bad func(string, ...any)) {
	if d.Broadcast.MaxAge <= 0 {
		bad("broadcast.max_age: %v: must be positive", d.Broadcast.MaxAge)
	}
	if d.Admin != "" {
		if path, ok := AdminUnixPath(d.Admin); ok {
			if !strings.HasPrefix(path, "/") {
				bad("admin: %q: a Unix socket path must be absolute", d.Admin)
			} else if len(path) > maxSocketPath {
				bad("admin: path is %d bytes; Unix socket paths are limited to %d", len(path), maxSocketPath)
			}
		} else if err := checkLoopback(d.Admin); err != nil {
			bad("admin: %v", err)
		}
	}
	if d.AdminMaxConns < 1 || d.AdminMaxConns > 10_000 {
		bad("admin_max_conns: %d: want 1 to 10000", d.AdminMaxConns)
	}
}

// CheckRedis reports what is wrong with a list of Redis addresses: it must
// be one Unix socket path, one sentinel://master-name@host:port[,host:port]
// address, one or more distinct host:port addresses, or redis://, rediss://
// or unix:// URLs (see lease.ParseTarget). pacerd's config and pacerctl's
// --redis flag share this rule. Errors never show a password.
func CheckRedis(addrs []string) error {
	_, err := lease.ParseTarget(addrs)
	return err
}

func checkHostPort(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil || host == "" {
		return fmt.Errorf("%q: want host:port or a Unix socket path starting with / or .", a)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%q: port %q: want 1 to 65535", a, port)
	}
	return nil
}

// checkEndpoint accepts host:port or a URL with one of schemes.
func checkEndpoint(e string, schemes ...string) error {
	if strings.Contains(e, "://") {
		return checkURL(e, schemes...)
	}
	return checkHostPort(e)
}

func checkURL(s string, schemes ...string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return fmt.Errorf("%q: want a URL such as %s://host:port", s, schemes[0])
	}
	for _, sc := range schemes {
		if u.Scheme == sc {
			return nil
		}
	}
	return fmt.Errorf("%q: scheme %q: want one of %s", s, u.Scheme, strings.Join(schemes, ", "))
}

// checkLoopback enforces the design's loopback-only admin listener: metrics
// and health are not meant for the network, and a typo like ":9464" would
// otherwise listen on every interface.
func checkLoopback(a string) error {
	if err := checkHostPort(a); err != nil {
		return err
	}
	host, _, _ := net.SplitHostPort(a)
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%q: host must be a loopback address (127.0.0.1, ::1 or localhost)", a)
}

// decodeStrict decodes one YAML document into out (a pointer to a struct)
// after checkTypes has vetted every key and scalar against out's type, so the
// errors name keys and lines rather than Go types. An empty document leaves
// out unchanged.
func decodeStrict(data []byte, out any) error {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return err
		}
		return fmt.Errorf("line %d: a second YAML document; want exactly one", extra.Line)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil
		}
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		return nil // a file of comments only
	}
	if err := errors.Join(checkTypes(root, typeOf(out), "")...); err != nil {
		return err
	}
	// KnownFields as a second line of defence: checkTypes already refused
	// unknown keys, with their full path.
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	return strict.Decode(out)
}
