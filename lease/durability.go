package lease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Policy is how the ledger's writes survive a Redis crash or failover.
type Policy int

const (
	// PolicyFsync: every Redis master runs `appendonly yes` with
	// `appendfsync always`, so a write is on disk before Redis acknowledges
	// it, and a restart from the AOF forgets nothing the daemons were told.
	PolicyFsync Policy = iota
	// PolicyReplicas: every money-changing script is followed, on the same
	// connection, by WAIT N; a grant that fewer than N replicas acknowledged
	// in time is not spent (it is released), so a promoted replica that
	// acknowledged it knows it.
	PolicyReplicas
	// PolicyNone: no guarantee. A Redis that loses writes can make the fleet
	// overspend. For tests and throw-away setups only.
	PolicyNone
)

// Durability is the ledger's durability policy (config key
// ledger.durability). The zero value is PolicyFsync, the default. It is a
// value; copies are independent and safe for concurrent use.
type Durability struct {
	Policy Policy
	// Replicas is N of replicas:N.
	Replicas int
	// WaitTimeout is how long WAIT waits for the replicas (default 1s). It
	// must be shorter than the ledger call's own timeout.
	WaitTimeout time.Duration
}

// ParseDurability parses a policy as the config file writes it: "fsync"
// (also ""), "replicas:N" with N ≥ 1, or "none".
func ParseDurability(s string) (Durability, error) {
	switch s = strings.TrimSpace(s); {
	case s == "" || s == "fsync":
		return Durability{Policy: PolicyFsync}, nil
	case s == "none":
		return Durability{Policy: PolicyNone}, nil
	case strings.HasPrefix(s, "replicas:"):
		n, err := strconv.Atoi(strings.TrimPrefix(s, "replicas:"))
		if err != nil || n < 1 || n > 64 {
			return Durability{}, fmt.Errorf("%q: want replicas:N with N from 1 to 64", s)
		}
		return Durability{Policy: PolicyReplicas, Replicas: n}, nil
	}
	return Durability{}, fmt.Errorf("%q: want fsync, replicas:N or none", s)
}

// String returns the policy as the config file writes it.
func (d Durability) String() string {
	switch d.Policy {
	case PolicyFsync:
		return "fsync"
	case PolicyReplicas:
		return "replicas:" + strconv.Itoa(d.Replicas)
	case PolicyNone:
		return "none"
	}
	return fmt.Sprintf("Policy(%d)", int(d.Policy))
}

// Covers reports whether a server known to meet d (an operator's
// ledger.durability_assume) meets want.
func (d Durability) Covers(want Durability) bool {
	switch want.Policy {
	case PolicyNone:
		return true
	case PolicyFsync:
		return d.Policy == PolicyFsync
	case PolicyReplicas:
		return d.Policy == PolicyReplicas && d.Replicas >= want.Replicas
	}
	return false
}

func (d Durability) waitTimeout() time.Duration {
	if d.WaitTimeout <= 0 {
		return time.Second
	}
	return d.WaitTimeout
}

// ErrNotDurable is wrapped by every error that says a write, or the server,
// does not meet the durability policy: a *DurabilityError from
// CheckDurability and a *NotDurableError from Run.
var ErrNotDurable = errors.New("lease: ledger not durable")

// DurabilityError says which Redis server does not meet the policy, which
// setting is wrong and how to fix it.
type DurabilityError struct {
	Addr   string
	Policy Durability
	// Problem is what the server does ("runs appendfsync everysec").
	Problem string
	// Fix is what the policy needs and how to get there.
	Fix string
}

func (e *DurabilityError) Error() string {
	return fmt.Sprintf("redis at %s %s; ledger.durability=%s %s", e.Addr, e.Problem, e.Policy, e.Fix)
}

// Unwrap lets errors.Is(err, ErrNotDurable) match.
func (e *DurabilityError) Unwrap() error { return ErrNotDurable }

// NotDurableError is a money-changing script that ran on the master but was
// not acknowledged by the policy's replicas in time. The write may vanish in
// a failover: a grant must not be spent (release it), and Reply holds the
// script's reply so the caller can.
type NotDurableError struct {
	Addr    string
	Acked   int64
	Want    int
	Timeout time.Duration
	// Reply is the script's reply.
	Reply any
}

func (e *NotDurableError) Error() string {
	return fmt.Sprintf("redis at %s: %d of %d replicas acknowledged the write within %v (ledger.durability=replicas:%d): a failover could lose it, so it must not be spent",
		e.Addr, e.Acked, e.Want, e.Timeout, e.Want)
}

// Unwrap lets errors.Is(err, ErrNotDurable) match.
func (e *NotDurableError) Unwrap() error { return ErrNotDurable }

// Int64s returns Reply as the integers the ledger's scripts reply with, or
// nil if it is not such a list: Ledger.run decodes it like a reply that
// was acknowledged, so that the grant's amount is known and can be released.
func (e *NotDurableError) Int64s() []int64 {
	list, ok := e.Reply.([]any)
	if !ok {
		return nil
	}
	out := make([]int64, len(list))
	for i, v := range list {
		n, ok := v.(int64)
		if !ok {
			return nil
		}
		out[i] = n
	}
	return out
}

// Run runs script s on the shard whose keys are given, as s.Run does, and
// under replicas:N follows it with WAIT N on the same connection (WAIT counts
// the acknowledgements of the connection's own last write, so it must not be
// sent on another pooled connection). A WAIT that did not reach N replicas
// makes the returned command fail with a *NotDurableError whose Reply is the
// script's reply. Under fsync and none it is exactly s.Run.
//
// The Ledger calls it for every money-changing script (Ledger.run, OpenDay).
// A retried call whose script finds its operation already done writes
// nothing, so its WAIT proves nothing about the first write: a grant that
// failed with ErrNotDurable is released, never retried under the same id.
func (d Durability) Run(ctx context.Context, rdb redis.UniversalClient, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	return d.run(ctx, rdb, evalScript{s}, keys, args...)
}

// ledgerCall is a script as Durability runs it: a *redis.Script (EVALSHA,
// then EVAL where the server lacks it) or a function of the ledger's
// library (FCALL, then FUNCTION LOAD and FCALL).
type ledgerCall interface {
	// Run sends the call, and again once if the server lacked the script.
	Run(ctx context.Context, rdb redis.UniversalClient, keys []string, args ...any) *redis.Cmd
	// send queues the call (EVALSHA or FCALL) on p.
	send(ctx context.Context, p redis.Cmdable, keys []string, args ...any) *redis.Cmd
	// resend queues on p what gives the server the script, and the call;
	// asking queues ASKING right before the call (see queueAsking).
	resend(ctx context.Context, p redis.Pipeliner, asking bool, keys []string, args ...any) *redis.Cmd
	// missing reports whether err says the server lacked the script.
	missing(err error) bool
}

type evalScript struct{ s *redis.Script }

func (e evalScript) Run(ctx context.Context, rdb redis.UniversalClient, keys []string, args ...any) *redis.Cmd {
	return e.s.Run(ctx, rdb, keys, args...)
}

func (e evalScript) send(ctx context.Context, p redis.Cmdable, keys []string, args ...any) *redis.Cmd {
	return e.s.EvalSha(ctx, p, keys, args...)
}

func (e evalScript) resend(ctx context.Context, p redis.Pipeliner, asking bool, keys []string, args ...any) *redis.Cmd {
	queueAsking(ctx, p, asking)
	return e.s.Eval(ctx, p, keys, args...)
}

func (e evalScript) missing(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }

func (d Durability) run(ctx context.Context, rdb redis.UniversalClient, s ledgerCall, keys []string, args ...any) *redis.Cmd {
	if d.Policy != PolicyReplicas {
		return s.Run(ctx, rdb, keys, args...)
	}
	if cc, isCluster := rdb.(*redis.ClusterClient); isCluster && len(keys) > 0 {
		return d.runRouted(ctx, cc, s, keys, args...)
	}
	node, ok := rdb.(*redis.Client)
	if !ok {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(fmt.Errorf("ledger.durability=%s: cannot WAIT through a %T", d, rdb))
		return cmd
	}
	return d.runOn(ctx, node, false, s, keys, args...)
}

// runOn runs s on node and WAITs for the replicas on the same connection;
// asking sends ASKING right before the call (an ASK redirection's target).
func (d Durability) runOn(ctx context.Context, node *redis.Client, asking bool, s ledgerCall, keys []string, args ...any) *redis.Cmd {
	sc, wc := d.runWait(ctx, node, func(p redis.Pipeliner) *redis.Cmd {
		queueAsking(ctx, p, asking)
		return s.send(ctx, p, keys, args...)
	})
	if s.missing(sc.Err()) {
		sc, wc = d.runWait(ctx, node, func(p redis.Pipeliner) *redis.Cmd { return s.resend(ctx, p, asking, keys, args...) })
	}
	if sc.Err() != nil {
		return sc
	}
	acked, err := wc.Int64()
	if err != nil {
		sc.SetErr(fmt.Errorf("WAIT %d after the script: %w", d.Replicas, err))
		return sc
	}
	if acked < int64(d.Replicas) {
		sc.SetErr(&NotDurableError{Addr: nodeAddr(ctx, node), Acked: acked, Want: d.Replicas, Timeout: d.waitTimeout(), Reply: sc.Val()})
	}
	return sc
}

func (d Durability) runWait(ctx context.Context, node *redis.Client, eval func(redis.Pipeliner) *redis.Cmd) (*redis.Cmd, *redis.Cmd) {
	var sc, wc *redis.Cmd
	// One pipeline is one connection on a single-node client: the WAIT is
	// about this script's write.
	_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
		sc = eval(p)
		wc = p.Do(ctx, "wait", d.Replicas, d.waitTimeout().Milliseconds())
		return nil
	})
	return sc, wc
}

// NodeDurability is what one Redis master reported about itself.
type NodeDurability struct {
	Addr string `json:"addr"`
	Role string `json:"role,omitempty"`
	// AppendOnly and AppendFsync are CONFIG GET's answers; empty when CONFIG
	// is refused (ConfigRefused says why).
	AppendOnly    string `json:"appendonly,omitempty"`
	AppendFsync   string `json:"appendfsync,omitempty"`
	ConfigRefused string `json:"config_refused,omitempty"`
	// AOFEnabled is INFO persistence's aof_enabled ("" if not read).
	AOFEnabled string `json:"aof_enabled,omitempty"`
	// Replicas counts the replicas INFO replication lists as online.
	Replicas int `json:"replicas"`
	// Assumed: the node could not be verified and ledger.durability_assume
	// vouched for it.
	Assumed bool `json:"assumed,omitempty"`
}

func (n NodeDurability) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "redis at %s role=%s", n.Addr, n.Role)
	if n.ConfigRefused != "" {
		fmt.Fprintf(&b, " CONFIG refused")
	} else if n.AppendOnly != "" {
		fmt.Fprintf(&b, " appendonly=%s appendfsync=%s", n.AppendOnly, n.AppendFsync)
	}
	fmt.Fprintf(&b, " replicas=%d", n.Replicas)
	if n.Assumed {
		b.WriteString(" (assumed per ledger.durability_assume)")
	}
	return b.String()
}

// DurabilityReport is what CheckDurability found.
type DurabilityReport struct {
	Policy string           `json:"policy"`
	Nodes  []NodeDurability `json:"nodes,omitempty"`
	// Warnings are true but not fatal: the policy is none, or a node was
	// assumed rather than verified.
	Warnings []string `json:"warnings,omitempty"`
}

// CheckDurability reads every master's settings (CONFIG GET appendonly and
// appendfsync, INFO persistence, INFO replication) and returns a
// *DurabilityError, naming the server, the setting and the fix, for the first
// that does not meet want. For a Cluster it checks every master.
//
// Where CONFIG is refused (managed Redis: renamed or denied by ACL), the
// server's fsync setting cannot be read; assume, the operator's
// ledger.durability_assume, then vouches for it if it covers want; nil
// refuses. Under PolicyNone nothing is read and the report carries a warning.
func CheckDurability(ctx context.Context, rdb redis.UniversalClient, want Durability, assume *Durability) (DurabilityReport, error) {
	rep := DurabilityReport{Policy: want.String()}
	if want.Policy == PolicyNone {
		rep.Warnings = append(rep.Warnings, "ledger.durability=none: Redis may lose acknowledged grants on a crash or failover, and the fleet may then spend more than a budget; use it only for tests and throw-away setups")
		return rep, nil
	}
	var (
		mu   sync.Mutex
		errs []error
	)
	check := func(ctx context.Context, c *redis.Client) error {
		n, err := checkNode(ctx, c, want, assume)
		mu.Lock()
		defer mu.Unlock()
		rep.Nodes = append(rep.Nodes, n)
		if n.Assumed {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("redis at %s refuses CONFIG (%s): its durability is assumed to be %s (ledger.durability_assume), not verified", n.Addr, n.ConfigRefused, assume))
		}
		if err != nil {
			errs = append(errs, err)
		}
		return nil
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		if err := c.ForEachMaster(ctx, check); err != nil {
			return rep, err
		}
	case *redis.Client:
		_ = check(ctx, c)
	default:
		return rep, fmt.Errorf("durability check: unsupported client %T", rdb)
	}
	return rep, errors.Join(errs...)
}

// refused reports whether err is the server refusing a command (renamed
// away, or denied by an ACL) rather than failing.
func refused(err error) bool {
	if err == nil {
		return false
	}
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "unknown command") || strings.HasPrefix(s, "noperm") || strings.Contains(s, "no permissions")
}

func checkNode(ctx context.Context, c *redis.Client, want Durability, assume *Durability) (NodeDurability, error) {
	n := NodeDurability{Addr: nodeAddr(ctx, c)}
	fail := func(problem, fix string) (NodeDurability, error) {
		return n, &DurabilityError{Addr: n.Addr, Policy: want, Problem: problem, Fix: fix}
	}
	repl, err := info(ctx, c, "replication")
	if err != nil && !refused(err) {
		return n, fmt.Errorf("redis at %s: INFO replication: %w", n.Addr, err)
	}
	infoRefused := err != nil
	n.Role = repl["role"]
	for k, v := range repl {
		if strings.HasPrefix(k, "slave") && strings.Contains(v, "state=online") {
			n.Replicas++
		}
	}
	if n.Role != "" && n.Role != "master" {
		return fail("is a replica (role:"+n.Role+")",
			"needs the ledger on the master: point redis: at the master (or at Sentinel, sentinel://name@host:port)")
	}

	if want.Policy == PolicyReplicas {
		if infoRefused {
			if assume != nil && assume.Covers(want) {
				n.Assumed, n.ConfigRefused = true, "INFO refused"
				return n, nil
			}
			return fail("refuses INFO ("+err.Error()+"), so its replicas cannot be counted",
				"cannot be verified: if the provider guarantees "+strconv.Itoa(want.Replicas)+" replicas, set ledger.durability_assume: "+want.String())
		}
		if n.Replicas < want.Replicas {
			return fail(fmt.Sprintf("has %d online replica(s)", n.Replicas),
				fmt.Sprintf("needs at least %d: attach them (`replicaof <master-host> <master-port>` on each replica), or set ledger.durability: fsync with `appendfsync always`", want.Replicas))
		}
		return n, nil
	}

	// PolicyFsync.
	pers, perr := info(ctx, c, "persistence")
	if perr != nil && !refused(perr) {
		return n, fmt.Errorf("redis at %s: INFO persistence: %w", n.Addr, perr)
	}
	n.AOFEnabled = pers["aof_enabled"]
	if st := pers["aof_last_write_status"]; st != "" && st != "ok" {
		return fail("reports aof_last_write_status:"+st+" (its last AOF write failed)",
			"needs a working AOF: check the disk of Redis's dir and its log")
	}
	cfg, cerr := c.ConfigGet(ctx, "append*").Result()
	if cerr != nil {
		if !refused(cerr) {
			return n, fmt.Errorf("redis at %s: CONFIG GET: %w", n.Addr, cerr)
		}
		n.ConfigRefused = cerr.Error()
		if n.AOFEnabled == "0" {
			return fail("runs with the AOF off (INFO persistence aof_enabled:0)",
				"needs `appendonly yes` and `appendfsync always`; CONFIG is refused here, so set them in the provider's settings")
		}
		if assume != nil && assume.Covers(want) {
			n.Assumed = true
			return n, nil
		}
		return fail("refuses CONFIG GET ("+cerr.Error()+"; managed Redis?), so its appendfsync cannot be read",
			"needs `appendonly yes` and `appendfsync always`: if the provider guarantees them, set ledger.durability_assume: fsync; otherwise use ledger.durability: replicas:N")
	}
	n.AppendOnly, n.AppendFsync = cfg["appendonly"], cfg["appendfsync"]
	if n.AppendOnly != "yes" {
		return fail("runs appendonly "+orUnset(n.AppendOnly),
			"needs `appendonly yes` and `appendfsync always` (CONFIG SET appendonly yes; CONFIG SET appendfsync always; and both in redis.conf), or set ledger.durability: replicas:N with N replicas attached")
	}
	if n.AppendFsync != "always" {
		return fail("runs appendfsync "+orUnset(n.AppendFsync),
			"needs `appendfsync always` (CONFIG SET appendfsync always, and in redis.conf), or set ledger.durability: replicas:N with N replicas attached")
	}
	return n, nil
}

func orUnset(s string) string {
	if s == "" {
		return "(unset)"
	}
	return s
}

// info returns one INFO section as key → value.
func info(ctx context.Context, c *redis.Client, section string) (map[string]string, error) {
	s, err := c.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m, nil
}

// nodeAddr names the server c talks to. A failover (Sentinel) client's
// options say only "FailoverClient"; the server's side of the connection
// (CLIENT INFO laddr) says which master Sentinel gave it.
func nodeAddr(ctx context.Context, c *redis.Client) string {
	addr := c.Options().Addr
	if addr != "FailoverClient" {
		return addr
	}
	s, err := c.Do(ctx, "client", "info").Text()
	if err != nil {
		return "the Sentinel master"
	}
	for _, f := range strings.Fields(s) {
		if v, ok := strings.CutPrefix(f, "laddr="); ok {
			return v + " (Sentinel master)"
		}
	}
	return "the Sentinel master"
}
