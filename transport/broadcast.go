package transport

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
)

// Event kinds broadcast over NATS, each on subject "pacer.<kind>.<campaign>".
const (
	// EventExhausted: the campaign-day has no budget left to grant. Daemons
	// answer SPEND with -1 once their tokens run out and stop lease calls.
	EventExhausted = "exhausted"
	// EventRevoked: paused or budget cut. Daemons drop the campaign's tokens,
	// answer -1, release their leases and re-read its settings.
	EventRevoked = "revoked"
	// EventChanged: settings changed (curve, budget raise, resume): re-read.
	EventChanged = "changed"
	// EventLostWrites: a daemon found that the ledger lost acknowledged
	// writes on a shard of the campaign-day (Day). Daemons re-assert the
	// leases they hold on the day; the ledger ignores ones it knows.
	EventLostWrites = "lost-writes"
)

// SubjectPrefix is the root of every pacer subject.
const SubjectPrefix = "pacer."

// Event is one broadcast. NATS is a fast path, never the source of truth: a
// daemon that misses an event learns the same fact from the ledger within a
// lease window.
type Event struct {
	Kind     string `json:"kind"`
	Campaign string `json:"campaign"`
	Day      string `json:"day,omitempty"`     // for exhausted: the campaign-day
	Version  int64  `json:"version,omitempty"` // campaign settings version, when known
	From     string `json:"from,omitempty"`    // the daemon or tool that sent it
	AtMillis int64  `json:"at_ms"`             // sender's clock, for propagation measurements
}

// Subject returns the event's NATS subject.
func (e Event) Subject() string { return SubjectPrefix + e.Kind + "." + e.Campaign }

func (e Event) validate() error {
	switch e.Kind {
	case EventExhausted, EventRevoked, EventChanged, EventLostWrites:
	default:
		return fmt.Errorf("unknown event kind %q", e.Kind)
	}
	if e.Campaign == "" || strings.ContainsAny(e.Campaign, ". *>\t\r\n") {
		return fmt.Errorf("campaign %q cannot be part of a subject", e.Campaign)
	}
	return nil
}

// Broadcaster publishes and receives pacer events over NATS. It reconnects
// forever: a NATS outage only delays events. Safe for concurrent use.
type Broadcaster struct {
	nc       *nats.Conn
	sub      *nats.Subscription
	log      *zap.Logger
	sent     atomic.Int64
	received atomic.Int64
	dropped  atomic.Int64
}

// BroadcastStats counts events.
type BroadcastStats struct {
	Sent, Received, Dropped int64
	Connected               bool
}

// Connect connects to NATS at url (comma-separated URLs for a cluster). If the
// server is down at start, it keeps retrying in the background.
func Connect(url, name string, log *zap.Logger) (*Broadcaster, error) {
	if log == nil {
		log = zap.NewNop()
	}
	log = log.Named("nats")
	nc, err := nats.Connect(url,
		nats.Name(name),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Warn("NATS disconnected; broadcasts wait, the ledger stays the source of truth", zap.Error(err))
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("NATS reconnected", zap.String("url", c.ConnectedUrl())) }),
	)
	if err != nil {
		return nil, fmt.Errorf("nats %s: %w", url, err)
	}
	return &Broadcaster{nc: nc, log: log}, nil
}

// Publish sends e. A disconnected client buffers it until it reconnects.
func (b *Broadcaster) Publish(e Event) error {
	if err := e.validate(); err != nil {
		return err
	}
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if err := b.nc.Publish(e.Subject(), data); err != nil {
		return fmt.Errorf("publish %s: %w", e.Subject(), err)
	}
	b.sent.Add(1)
	return nil
}

// Flush waits until published events have reached the server.
func (b *Broadcaster) Flush(timeout time.Duration) error { return b.nc.FlushTimeout(timeout) }

// Subscribe calls handle for every pacer event, from one goroutine, in order.
// Malformed messages are counted and dropped.
func (b *Broadcaster) Subscribe(handle func(Event)) error {
	if b.sub != nil {
		return errors.New("already subscribed")
	}
	sub, err := b.nc.Subscribe(SubjectPrefix+">", func(m *nats.Msg) {
		var e Event
		if err := json.Unmarshal(m.Data, &e); err != nil || e.validate() != nil || e.Subject() != m.Subject {
			b.dropped.Add(1)
			return
		}
		b.received.Add(1)
		handle(e)
	})
	if err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	b.sub = sub
	return nil
}

// Stats returns the event counters.
func (b *Broadcaster) Stats() BroadcastStats {
	return BroadcastStats{Sent: b.sent.Load(), Received: b.received.Load(), Dropped: b.dropped.Load(), Connected: b.nc.IsConnected()}
}

// Close drains the subscription and closes the connection.
func (b *Broadcaster) Close() {
	if b.sub != nil {
		_ = b.sub.Unsubscribe()
	}
	b.nc.Close()
}
