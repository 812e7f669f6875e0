// Package broadcast is the fleet's fast path: pacer events (pacer.Event:
// a campaign-day exhausted, a campaign revoked or changed, lost ledger
// writes) published and received over NATS, on subjects
// "pacer.<kind>.<campaign>", optionally signed with the fleet's keys (see
// ParseKeys) so a receiver ignores forged, stale and replayed events.
//
// NATS is never the source of truth: an event only makes a daemon ask the
// ledger sooner, and a daemon that misses one learns the same fact from the
// ledger within a lease window. A Broadcaster reconnects forever, so a NATS
// outage only delays events.
package broadcast

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	neturl "net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/pacer/pacer"
	"go.uber.org/zap"
)

// SubjectPrefix is the root of every pacer subject.
const SubjectPrefix = "pacer."

// Subject returns the NATS subject an event is published on,
// "pacer.<kind>.<campaign>": receivers subscribe by kind or campaign with
// NATS wildcards, and drop an event whose payload names another subject.
func Subject(e pacer.Event) string { return SubjectPrefix + e.Kind + "." + e.Campaign }

// Broadcaster publishes and receives pacer events over NATS. It reconnects
// forever: a NATS outage only delays events. Safe for concurrent use.
type Broadcaster struct {
	nc       *nats.Conn
	sub      *nats.Subscription
	log      *zap.Logger
	sent     atomic.Int64
	received atomic.Int64
	dropped  atomic.Int64
	refused  atomic.Int64
	trust    *trust
	rejected map[string]*atomic.Int64 // by reason; read-only map after ConnectWith
}

// BroadcastStats counts events.
type Stats struct {
	Sent, Received, Dropped int64
	// Refused counts permissions violations the server sent back: this
	// client published or subscribed where its NATS user may not.
	Refused int64
	// Rejected counts events ignored because they failed authentication,
	// by reason (RejectReasons); nil without keys.
	Rejected  map[string]int64
	Connected bool
}

// BroadcastOptions are how a Broadcaster connects. The zero value connects
// anonymously, in clear unless a URL is tls://. Secrets come from the caller
// (cmd reads the files); they are never logged.
type Options struct {
	// Name is the connection's name on the server (monitoring).
	Name   string
	Logger *zap.Logger
	// Username and Password: a user of the server's users list.
	Username, Password string
	// JWT and Seed: a user JWT and its nkey seed, as a .creds file holds
	// them (see ParseCreds), for decentralised (operator) auth.
	JWT, Seed string
	// NkeySeed is a user nkey seed (SU…) for a server that lists the user's
	// public nkey.
	NkeySeed string
	// TLS, if not nil, is required of the connection: RootCAs verify the
	// server, Certificates are the client's.
	TLS *tls.Config
	// Keys authenticate events (see ParseKeys): the first signs what this
	// client publishes; received events must verify with one of them, be
	// at most MaxAge old (or ahead) by Now, and not be replays. Nil: events
	// are sent unsigned and every well-formed event is accepted.
	Keys   [][]byte
	MaxAge time.Duration    // required with Keys
	Now    func() time.Time // the receiver's clock; nil: time.Now
}

// Connect connects to NATS at url (comma-separated URLs for a cluster) with
// no credentials. See ConnectWith.
func Connect(url, name string, log *zap.Logger) (*Broadcaster, error) {
	return ConnectWith(url, Options{Name: name, Logger: log})
}

// ConnectWith connects to NATS at url (comma-separated URLs for a cluster)
// as opt says. If the server is down at start, it keeps retrying in the
// background. URLs are redacted (user info hidden) in its log lines and
// errors.
func ConnectWith(url string, opt Options) (*Broadcaster, error) {
	log := opt.Logger
	if log == nil {
		log = zap.NewNop()
	}
	log = log.Named("nats")
	b := &Broadcaster{log: log}
	if err := b.setTrust(opt); err != nil {
		return nil, err
	}
	auth, err := authOptions(opt)
	if err != nil {
		return nil, err
	}
	opts := append(b.connOptions(opt.Name), auth...)
	if opt.TLS != nil {
		opts = append(opts, nats.Secure(opt.TLS))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("nats %s: %w", RedactURLs(url), err)
	}
	b.nc = nc
	return b, nil
}

// setTrust checks opt's keys and, with keys, sets up the signing and the
// checks of received events.
func (b *Broadcaster) setTrust(opt Options) error {
	if len(opt.Keys) == 0 {
		return nil
	}
	if opt.MaxAge <= 0 {
		return errors.New("nats: signed broadcasts need a positive MaxAge")
	}
	for i, k := range opt.Keys {
		if len(k) < MinKeyBytes {
			return fmt.Errorf("broadcast key %d: %d bytes; at least %d needed", i+1, len(k), MinKeyBytes)
		}
	}
	now := opt.Now
	if now == nil {
		now = time.Now
	}
	b.trust = &trust{keys: opt.Keys, maxAge: opt.MaxAge, now: now}
	b.rejected = map[string]*atomic.Int64{}
	for _, r := range RejectReasons {
		b.rejected[r] = new(atomic.Int64)
	}
	return nil
}

// connOptions are the connection's name, its retries forever, and its
// handlers: each disconnection, reconnection, failed attempt and refused
// request is logged, the last counted.
func (b *Broadcaster) connOptions(name string) []nats.Option {
	log := b.log
	return []nats.Option{
		nats.Name(name),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Warn("NATS disconnected; broadcasts wait, the ledger stays the source of truth", zap.Error(err))
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("NATS reconnected", zap.String("url", c.ConnectedUrlRedacted())) }),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			// Every failed attempt, including the first connection's: a
			// refused password or certificate shows here, not in Connect.
			log.Warn("NATS connection attempt failed; retrying", zap.Error(err))
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			// A permissions violation: the server refused something this
			// client's NATS user may not do (see docs/SECURITY.md). Other
			// asynchronous errors (a slow consumer) are only logged.
			if errors.Is(err, nats.ErrPermissionViolation) {
				b.refused.Add(1)
				log.Warn("NATS server refused a request: permissions violation", zap.Error(err))
				return
			}
			log.Warn("NATS asynchronous error", zap.Error(err))
		}),
	}
}

// authOptions are the credentials opt gives: at most one of a user and
// password, a JWT and seed, or an nkey seed.
func authOptions(opt Options) ([]nats.Option, error) {
	var opts []nats.Option
	if opt.Username != "" || opt.Password != "" {
		opts = append(opts, nats.UserInfo(opt.Username, opt.Password))
	}
	if opt.JWT != "" || opt.Seed != "" {
		opts = append(opts, nats.UserJWTAndSeed(opt.JWT, opt.Seed))
	}
	if opt.NkeySeed != "" {
		kp, err := nkeys.FromSeed([]byte(opt.NkeySeed))
		if err != nil {
			return nil, fmt.Errorf("nats nkey seed: %w", err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, fmt.Errorf("nats nkey seed: %w", err)
		}
		opts = append(opts, nats.Nkey(pub, kp.Sign))
	}
	if len(opts) > 1 {
		return nil, errors.New("nats: give one of user/password, creds (JWT and seed) or an nkey seed")
	}
	return opts, nil
}

// RedactURLs hides the user info (user, password, token) of every URL in a
// comma-separated list, for logs and errors.
func RedactURLs(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		u, err := neturl.Parse(p)
		switch {
		case err != nil && strings.Contains(p, "@"):
			parts[i] = "(unparsable URL with user info)"
		case err != nil || u.User == nil:
			parts[i] = p
		default:
			u.User = neturl.User("xxxxx")
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}

// ParseCreds returns the user JWT and nkey seed of a NATS credentials file's
// content (as `nsc generate creds` writes it).
func ParseCreds(contents []byte) (jwt, seed string, err error) {
	jwt, err = nkeys.ParseDecoratedJWT(contents)
	if err != nil {
		return "", "", fmt.Errorf("creds: user JWT: %w", err)
	}
	kp, err := nkeys.ParseDecoratedNKey(contents)
	if err != nil {
		return "", "", fmt.Errorf("creds: nkey seed: %w", err)
	}
	raw, err := kp.Seed()
	if err != nil {
		return "", "", fmt.Errorf("creds: nkey seed: %w", err)
	}
	return jwt, string(raw), nil
}

// Publish sends e. A disconnected client buffers it until it reconnects.
// With keys, it sets e's nonce (and AtMillis, if zero) and signs it.
func (b *Broadcaster) Publish(e pacer.Event) error {
	if err := e.Validate(); err != nil {
		return err
	}
	msg := &nats.Msg{Subject: Subject(e)}
	if b.trust != nil {
		e.Nonce = newNonce()
		if e.AtMillis == 0 {
			e.AtMillis = b.trust.now().UnixMilli()
		}
	}
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	msg.Data = data
	if b.trust != nil {
		msg.Header = nats.Header{SignatureHeader: []string{b.trust.sign(msg.Subject, data)}}
	}
	if err := b.nc.PublishMsg(msg); err != nil {
		return fmt.Errorf("publish %s: %w", Subject(e), err)
	}
	b.sent.Add(1)
	return nil
}

// Flush waits until published events have reached the server.
func (b *Broadcaster) Flush(timeout time.Duration) error { return b.nc.FlushTimeout(timeout) }

// Subscribe calls handle for every pacer event, from one goroutine, in order.
// Malformed messages are counted and dropped.
func (b *Broadcaster) Subscribe(handle func(pacer.Event)) error {
	if b.sub != nil {
		return errors.New("already subscribed")
	}
	sub, err := b.nc.Subscribe(SubjectPrefix+">", func(m *nats.Msg) {
		if len(m.Data) > maxPayload {
			b.dropped.Add(1)
			return
		}
		if b.trust != nil {
			if why := b.trust.verify(m.Subject, m.Data, m.Header.Get(SignatureHeader)); why != "" {
				b.reject(why, m.Subject)
				return
			}
		}
		var e pacer.Event
		if err := json.Unmarshal(m.Data, &e); err != nil || e.Validate() != nil || Subject(e) != m.Subject {
			b.dropped.Add(1)
			return
		}
		if b.trust != nil {
			if why := b.trust.admit(e); why != "" {
				b.reject(why, m.Subject)
				return
			}
		}
		handle(e)
		b.received.Add(1) // after handle: a count seen means the event was applied
	})
	if err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	b.sub = sub
	return nil
}

// reject counts and logs an event that failed authentication. The logger
// samples: a flood of forgeries costs a counter increment each.
func (b *Broadcaster) reject(why, subject string) {
	b.rejected[why].Add(1)
	b.log.Warn("broadcast ignored: not authenticated", zap.String("reason", why), zap.String("subject", subject))
}

// Signed reports whether this Broadcaster signs and verifies events.
func (b *Broadcaster) Signed() bool { return b.trust != nil }

// Stats returns the event counters.
func (b *Broadcaster) Stats() Stats {
	s := Stats{Sent: b.sent.Load(), Received: b.received.Load(), Dropped: b.dropped.Load(), Refused: b.refused.Load(),
		Connected: b.nc.IsConnected()}
	if b.rejected != nil {
		s.Rejected = make(map[string]int64, len(b.rejected))
		for r, n := range b.rejected {
			s.Rejected[r] = n.Load()
		}
	}
	return s
}

// Close drains the subscription and closes the connection.
func (b *Broadcaster) Close() {
	if b.sub != nil {
		_ = b.sub.Unsubscribe()
	}
	b.nc.Close()
}
