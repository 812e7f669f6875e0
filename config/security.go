package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pacer/pacer/broadcast"
	"github.com/pacer/pacer/lease"
)

// TLS is the TLS section of one link (redis_tls, etcd_tls, nats_tls). The
// zero value is plain TCP.
type TLS struct {
	// Enabled turns TLS on. A rediss://, https:// or tls:// address turns
	// it on too, with the system's roots unless CAFile is set.
	Enabled bool `yaml:"enabled"`
	// CAFile is a PEM bundle of the private CA(s) that sign the server's
	// certificate; empty: the system's roots.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are this client's certificate and key (PEM), for
	// servers that require client certificates; both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name the server's certificate must carry; empty:
	// the host of each address.
	ServerName string `yaml:"server_name"`
}

func (t TLS) validate(key string, bad func(string, ...any)) {
	if (t.CertFile == "") != (t.KeyFile == "") {
		bad("%s: cert_file and key_file go together (the client's certificate and its key)", key)
	}
	if !t.Enabled && (t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != "") {
		bad("%s: files or server_name given but enabled is false: set enabled: true (or remove them)", key)
	}
}

// Config returns the crypto/tls configuration of the section, reading its
// files with readFile (cmd passes os.ReadFile), or nil when TLS is off.
// Certificates are verified (there is no switch to skip it): a private CA
// goes in ca_file.
func (t TLS) Config(readFile func(string) ([]byte, error)) (*tls.Config, error) {
	if !t.Enabled {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pem, err := readFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file %s: no PEM certificate in it", t.CAFile)
		}
		c.RootCAs = pool
	}
	if t.CertFile != "" {
		certPEM, err := readFile(t.CertFile)
		if err != nil {
			return nil, fmt.Errorf("cert_file: %w", err)
		}
		keyPEM, err := readFile(t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("key_file: %w", err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("cert_file %s with key_file %s: %w", t.CertFile, t.KeyFile, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// RedisAuth is the redis_auth section: the ledger's credentials. The
// password is never in this file: it is read from PasswordFile, or, when
// that is empty, from the environment variable PACER_REDIS_PASSWORD (then
// REDISCLI_AUTH, as redis-cli reads it), by cmd/pacerd.
type RedisAuth struct {
	// Username is the ACL user; empty: the default user (requirepass).
	Username string `yaml:"username"`
	// PasswordFile holds the password (one line; a trailing newline is
	// dropped). Keep it mode 0640 root:pacer or tighter.
	PasswordFile string `yaml:"password_file"`
	// SentinelUsername and SentinelPasswordFile authenticate to the
	// Sentinels of a sentinel:// address, which have their own ACL.
	SentinelUsername     string `yaml:"sentinel_username"`
	SentinelPasswordFile string `yaml:"sentinel_password_file"`
}

// EtcdAuth is the etcd_auth section: etcd's user and password (etcd's
// own auth, `etcdctl auth enable`), which can go with or without client
// certificates.
type EtcdAuth struct {
	Username     string `yaml:"username"`
	PasswordFile string `yaml:"password_file"`
}

// NATSAuth is the nats_auth section: at most one way to authenticate.
type NATSAuth struct {
	// CredsFile is a NATS credentials file (a user JWT and its nkey seed),
	// as `nsc generate creds` writes for decentralised auth.
	CredsFile string `yaml:"creds_file"`
	// NkeyFile holds a user nkey seed (SU…), for a server that lists the
	// user's public nkey.
	NkeyFile string `yaml:"nkey_file"`
	// Username with PasswordFile: a server's users list.
	Username     string `yaml:"username"`
	PasswordFile string `yaml:"password_file"`
}

func (a NATSAuth) validate(bad func(string, ...any)) {
	n := 0
	for _, s := range []string{a.CredsFile, a.NkeyFile, a.Username} {
		if s != "" {
			n++
		}
	}
	if n > 1 {
		bad("nats_auth: give one of creds_file, nkey_file or username (with password_file)")
	}
	if (a.Username == "") != (a.PasswordFile == "") {
		bad("nats_auth: username and password_file go together")
	}
}

// Broadcast is the broadcast section: how NATS events are authenticated.
type Broadcast struct {
	// KeyFile holds the fleet's shared HMAC-SHA256 key (at least 32 bytes,
	// e.g. `head -c 32 /dev/urandom | base64`). Daemons sign what they
	// publish and ignore events without a valid signature. Empty: events are
	// neither signed nor checked (a warning at start).
	KeyFile string `yaml:"key_file"`
	// MaxAge is how old (by the sender's clock, beyond lease.skew_bound) an
	// event may be and still be acted on; older ones are ignored, and
	// replays within it are refused by their nonce.
	MaxAge time.Duration `yaml:"max_age"`
}

// ReadSecret reads a secret file for cmd: the file's content without one
// trailing newline. An empty secret is an error (a file truncated by
// mistake must not mean "no password").
func ReadSecret(readFile func(string) ([]byte, error), path string) (string, error) {
	b, err := readFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if s == "" {
		return "", fmt.Errorf("%s: empty", path)
	}
	return s, nil
}

// Secrets is how cmd hands this package the outside world: a file reader
// and an environment lookup (os.ReadFile and os.Getenv in production).
type Secrets struct {
	ReadFile func(string) ([]byte, error)
	Getenv   func(string) string
}

// RedisPasswordEnv lists the environment variables a Redis password is
// taken from, in order, when neither a URL nor redis_auth.password_file
// gives one. REDISCLI_AUTH is what redis-cli reads.
var RedisPasswordEnv = []string{"PACER_REDIS_PASSWORD", "REDISCLI_AUTH"}

// RedisClientOptions resolves the ledger's credentials and TLS: the
// password from auth.PasswordFile, else the environment (RedisPasswordEnv)
// unless an address's URL carries credentials; the TLS files read and
// checked. The result goes to lease.NewClientWith.
func RedisClientOptions(addrs []string, auth RedisAuth, t TLS, s Secrets) (lease.ClientOptions, error) {
	target, err := lease.ParseTarget(addrs)
	if err != nil {
		return lease.ClientOptions{}, fmt.Errorf("redis: %w", err)
	}
	opt := lease.ClientOptions{Username: auth.Username, SentinelUsername: auth.SentinelUsername}
	inURL := target.Username != "" || target.Password != ""
	switch {
	case auth.PasswordFile != "":
		if inURL {
			return opt, errors.New("redis_auth.password_file: the redis URL carries credentials too; give them once")
		}
		if opt.Password, err = ReadSecret(s.ReadFile, auth.PasswordFile); err != nil {
			return opt, fmt.Errorf("redis_auth.password_file: %w", err)
		}
	case !inURL && s.Getenv != nil:
		for _, k := range RedisPasswordEnv {
			if v := s.Getenv(k); v != "" {
				opt.Password = v
				break
			}
		}
	}
	if inURL && auth.Username != "" {
		return opt, errors.New("redis_auth.username: the redis URL names a user too; give it once")
	}
	if auth.SentinelPasswordFile != "" {
		if opt.SentinelPassword, err = ReadSecret(s.ReadFile, auth.SentinelPasswordFile); err != nil {
			return opt, fmt.Errorf("redis_auth.sentinel_password_file: %w", err)
		}
	}
	if opt.TLS, err = t.Config(s.ReadFile); err != nil {
		return opt, fmt.Errorf("redis_tls: %w", err)
	}
	return opt, nil
}

// EtcdClient is what the election's etcd client needs besides endpoints.
type EtcdClient struct {
	Username, Password string
	TLS                *tls.Config
}

// EtcdClientOptions resolves etcd's credentials (auth.PasswordFile) and TLS
// files. An https:// endpoint without etcd_tls gets the system's roots; an
// http:// endpoint with etcd_tls is an error, since etcd's client would
// silently drop TLS for it.
func EtcdClientOptions(endpoints []string, auth EtcdAuth, t TLS, s Secrets) (EtcdClient, error) {
	c := EtcdClient{Username: auth.Username}
	var err error
	if auth.PasswordFile != "" {
		if c.Password, err = ReadSecret(s.ReadFile, auth.PasswordFile); err != nil {
			return c, fmt.Errorf("etcd_auth.password_file: %w", err)
		}
	}
	if c.TLS, err = t.Config(s.ReadFile); err != nil {
		return c, fmt.Errorf("etcd_tls: %w", err)
	}
	for _, e := range endpoints {
		switch {
		case strings.HasPrefix(e, "http://") && c.TLS != nil:
			return c, fmt.Errorf("etcd: %q is http:// but etcd_tls is enabled: write https:// (etcd's client would send it in clear)", e)
		case strings.HasPrefix(e, "https://") && c.TLS == nil:
			c.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
		}
	}
	return c, nil
}

// NATSClientOptions resolves the broadcasts' credentials and TLS: it reads
// nats_auth's file (creds, nkey seed or password) and nats_tls's files. The
// caller sets Name and Logger.
func NATSClientOptions(auth NATSAuth, t TLS, s Secrets) (broadcast.Options, error) {
	var opt broadcast.Options
	var err error
	switch {
	case auth.CredsFile != "":
		b, err := s.ReadFile(auth.CredsFile)
		if err != nil {
			return opt, fmt.Errorf("nats_auth.creds_file: %w", err)
		}
		if opt.JWT, opt.Seed, err = broadcast.ParseCreds(b); err != nil {
			return opt, fmt.Errorf("nats_auth.creds_file %s: %w", auth.CredsFile, err)
		}
	case auth.NkeyFile != "":
		if opt.NkeySeed, err = ReadSecret(s.ReadFile, auth.NkeyFile); err != nil {
			return opt, fmt.Errorf("nats_auth.nkey_file: %w", err)
		}
	case auth.Username != "":
		opt.Username = auth.Username
		if opt.Password, err = ReadSecret(s.ReadFile, auth.PasswordFile); err != nil {
			return opt, fmt.Errorf("nats_auth.password_file: %w", err)
		}
	}
	if opt.TLS, err = t.Config(s.ReadFile); err != nil {
		return opt, fmt.Errorf("nats_tls: %w", err)
	}
	return opt, nil
}
