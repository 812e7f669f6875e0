package reconcile

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Leadership is a won election. Fence is the fencing token the reconciler
// passes to the ledger scripts: it grows with every new leader, so a deposed
// leader's late writes are refused. Lost is closed when leadership ends.
type Leadership struct {
	Fence int64
	Lost  <-chan struct{}
	// Cause, if set, says why leadership ended, once Lost is closed.
	Cause func() error
	// Remaining, if set, is how long the term's session has left as the
	// election's store sees it (etcd's lease TTL): near the session's TTL
	// while renewals reach it, falling towards 0 when they do not.
	Remaining func(ctx context.Context) (time.Duration, error)
}

// Elector elects the fleet's reconciler.
type Elector interface {
	// Campaign blocks until this daemon leads, or ctx ends.
	Campaign(ctx context.Context) (Leadership, error)
	// Resign gives leadership up, if held.
	Resign(ctx context.Context) error
}

// EtcdElector campaigns in an etcd election (clientv3/concurrency). Each term
// has its own session: when the session's lease is lost (etcd unreachable for
// a TTL, or the session killed), Lost closes and the reconciler stops.
type EtcdElector struct {
	client *clientv3.Client
	holder string
	ttl    int
	prefix string

	session  *concurrency.Session
	election *concurrency.Election
}

// ElectionPrefix is the etcd key prefix of the reconciler election.
const ElectionPrefix = "/pacer/reconciler"

// DefaultSessionTTL is the election session's lease when none is given
// (pacerd's election.ttl).
const DefaultSessionTTL = 15 * time.Second

// NewEtcdElector returns an elector for holder. ttlSeconds is the session
// lease (DefaultSessionTTL if not positive): how long a dead leader keeps
// the role before another takes over, and how long a leader's renewals
// (every third of it) may fail to reach etcd before it loses the role.
func NewEtcdElector(client *clientv3.Client, holder string, ttlSeconds int) *EtcdElector {
	if ttlSeconds <= 0 {
		ttlSeconds = int(DefaultSessionTTL / time.Second)
	}
	return &EtcdElector{client: client, holder: holder, ttl: ttlSeconds, prefix: ElectionPrefix}
}

// Campaign implements Elector.
func (e *EtcdElector) Campaign(ctx context.Context) (Leadership, error) {
	s, err := concurrency.NewSession(e.client, concurrency.WithTTL(e.ttl), concurrency.WithContext(ctx))
	if err != nil {
		return Leadership{}, fmt.Errorf("etcd session: %w", err)
	}
	el := concurrency.NewElection(s, e.prefix)
	if err := el.Campaign(ctx, e.holder); err != nil {
		s.Close()
		return Leadership{}, fmt.Errorf("etcd election: %w", err)
	}
	e.session, e.election = s, el
	return Leadership{Fence: el.Rev(), Lost: s.Done(), Cause: func() error { return e.sessionCause(s) },
		Remaining: func(ctx context.Context) (time.Duration, error) { return e.remaining(ctx, s) }}, nil
}

// remaining is Leadership.Remaining for session s: its lease's TTL as etcd
// says (0 once expired).
func (e *EtcdElector) remaining(ctx context.Context, s *concurrency.Session) (time.Duration, error) {
	ttl, err := e.client.TimeToLive(ctx, s.Lease())
	if err != nil {
		return 0, fmt.Errorf("etcd session lease %x: %w", s.Lease(), err)
	}
	return time.Duration(max(ttl.TTL, 0)) * time.Second, nil
}

// sessionCause says why a session ended, asking etcd about its lease.
func (e *EtcdElector) sessionCause(s *concurrency.Session) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ttl, err := e.client.TimeToLive(ctx, s.Lease())
	switch {
	case err != nil:
		return fmt.Errorf("etcd session lease %x: renewals stopped and etcd does not answer: %w", s.Lease(), err)
	case ttl.TTL <= 0:
		return fmt.Errorf("etcd session lease %x expired: no renewal reached etcd within its %ds TTL (etcd unreachable, or this host too loaded to renew; see election.ttl)", s.Lease(), e.ttl)
	default:
		return fmt.Errorf("etcd session lease %x still has %ds but the client stopped renewing it (its keep-alive stream failed)", s.Lease(), ttl.TTL)
	}
}

// Resign implements Elector.
func (e *EtcdElector) Resign(ctx context.Context) error {
	if e.election == nil {
		return nil
	}
	err := e.election.Resign(ctx)
	e.session.Close()
	e.session, e.election = nil, nil
	return err
}

// Leader returns the current leader's holder name, or "" if there is none.
func Leader(ctx context.Context, client *clientv3.Client) (string, error) {
	c, err := candidates(ctx, client, clientv3.WithLimit(1))
	if err != nil || len(c) == 0 {
		return "", err
	}
	return c[0], nil
}

// Candidates returns the holder names campaigning, the leader first and
// then the standbys in the order they would take over: the candidate with
// the oldest key leads (concurrency.Election's rule).
func Candidates(ctx context.Context, client *clientv3.Client) ([]string, error) {
	return candidates(ctx, client)
}

func candidates(ctx context.Context, client *clientv3.Client, opts ...clientv3.OpOption) ([]string, error) {
	opts = append([]clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)}, opts...)
	resp, err := client.Get(ctx, ElectionPrefix+"/", opts...)
	if err != nil {
		return nil, fmt.Errorf("election %s: %w", ElectionPrefix, err)
	}
	out := make([]string, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		out[i] = string(kv.Value)
	}
	return out, nil
}

// Trivial is an Elector that always leads with a fixed fence, like doorman's
// election.Trivial: for tests, and for a single-host deployment without etcd.
type Trivial struct{ Fence int64 }

// Campaign implements Elector.
func (t Trivial) Campaign(ctx context.Context) (Leadership, error) {
	return Leadership{Fence: t.Fence, Lost: make(chan struct{})}, ctx.Err()
}

// Resign implements Elector.
func (Trivial) Resign(context.Context) error { return nil }

// leadershipCause is why a term ended, if its elector says.
func leadershipCause(l Leadership) error {
	if l.Cause == nil {
		return nil
	}
	return l.Cause()
}
