package lease

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The write watermark. Each shard's history chain (Shard.Seq, Tip) tells a
// daemon that a shard lost writes it saw; a daemon that is new after a
// restore saw nothing and cannot tell. So each Redis master also carries a
// watermark that the elected reconciler advances once per pass, with a
// script run under the ledger's durability policy, and records outside
// Redis (package reconcile keeps it in etcd). A master whose watermark is
// behind that record came back with less than it acknowledged: a restored
// backup, a restart without persistence, a failover to a lagging replica.
//
//	pacer:watermark            hash  epoch counter fence (a single server)
//	pacer:watermark:{<tag>}    hash  the same, on a Cluster: one per master, in
//	                                 the first slot it serves (tag: slotTags)
//
// counter only grows; epoch is drawn at random when the key is created, so
// a key created again after it was lost is told from the one recorded;
// fence is the newest reconciler fence that advanced it (older ones are
// refused, as by the shards' scripts).
const watermarkKey = keyPrefix + "watermark"

//go:embed lua/watermark.lua
var luaWatermark string

var watermarkScript = evalScript{redis.NewScript(luaWatermark)}

// ErrWatermarkMoved: the watermark is no longer what the caller read (another
// reconciler advanced it, or Redis was restored meanwhile). Nothing was
// written; compare again.
var ErrWatermarkMoved = errors.New("lease: watermark moved since it was read")

// Watermark is how far a Redis master's acknowledged writes have gone, as
// the reconciler last advanced it. The zero value is a master with none.
type Watermark struct {
	// Epoch names the key's incarnation (random, below 2^52 so that Lua's
	// numbers hold it exactly).
	Epoch int64 `json:"epoch"`
	// Counter grows by at least one per reconciler pass; it starts at 1.
	Counter int64 `json:"counter"`
}

func (w Watermark) String() string { return fmt.Sprintf("%d@%x", w.Counter, w.Epoch) }

// Behind reports whether w, read from Redis, is behind recorded, the value
// kept outside Redis after Redis acknowledged it: Redis lost acknowledged
// writes. It is behind when its counter is lower (a missing key, the zero
// Watermark, is lower than any recorded one), or when it is another
// incarnation of the key that has not gone past the recorded counter.
func (w Watermark) Behind(recorded Watermark) bool {
	return w.Counter < recorded.Counter || (w.Epoch != recorded.Epoch && w.Counter <= recorded.Counter)
}

// Master is one Redis master as the watermark names it.
type Master struct {
	// Name identifies the watermark: "redis" for a single server (or a
	// Sentinel-managed primary), "slot-<n>" on a Cluster, n the first slot
	// the master serves. A promoted replica serves the same slots, so it
	// has the same name: its watermark is compared with its master's.
	Name string `json:"name"`
	// Addr is the server's address, for people.
	Addr string `json:"addr"`
	// Slots are the slot ranges [start, end] the master serves; nil on a
	// single server, which holds every shard.
	Slots [][2]int `json:"slots,omitempty"`
	key   string
}

// Owns reports whether the master holds shard k's keys.
func (m Master) Owns(k ShardKey) bool {
	if m.Slots == nil {
		return true
	}
	s := Slot(k.String())
	for _, r := range m.Slots {
		if s >= r[0] && s <= r[1] {
			return true
		}
	}
	return false
}

// Masters lists the masters the ledger's keys live on: one for a single
// server, each Cluster master (CLUSTER SLOTS) otherwise, by name.
func (l *Ledger) Masters(ctx context.Context) ([]Master, error) {
	if !l.cluster {
		addr := "redis"
		if c, ok := l.rdb.(*redis.Client); ok {
			addr = nodeAddr(ctx, c) // a Sentinel client's options say only "FailoverClient"
		}
		return []Master{{Name: "redis", Addr: addr, key: watermarkKey}}, nil
	}
	slots, err := l.rdb.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("ledger: cluster slots: %w", err)
	}
	byID := map[string]*Master{}
	var out []*Master
	for _, s := range slots {
		if len(s.Nodes) == 0 {
			continue
		}
		n := s.Nodes[0] // the master; replicas follow
		m := byID[n.ID]
		if m == nil {
			m = &Master{Addr: n.Addr}
			byID[n.ID] = m
			out = append(out, m)
		}
		m.Slots = append(m.Slots, [2]int{s.Start, s.End})
	}
	masters := make([]Master, len(out))
	for i, m := range out {
		slices.SortFunc(m.Slots, func(a, b [2]int) int { return a[0] - b[0] })
		first := m.Slots[0][0]
		m.Name = "slot-" + strconv.Itoa(first)
		m.key = watermarkKey + ":{" + slotTags()[first] + "}"
		masters[i] = *m
	}
	slices.SortFunc(masters, func(a, b Master) int { return a.Slots[0][0] - b.Slots[0][0] })
	return masters, nil
}

// ReadWatermark returns master m's watermark; ok is false if it has none.
func (l *Ledger) ReadWatermark(ctx context.Context, m Master) (w Watermark, ok bool, err error) {
	v, err := l.rdb.HMGet(ctx, m.key, "epoch", "counter").Result()
	if err != nil {
		return Watermark{}, false, fmt.Errorf("ledger: watermark of %s: %w", m.Name, err)
	}
	e, ok1 := v[0].(string)
	c, ok2 := v[1].(string)
	if !ok1 || !ok2 {
		return Watermark{}, false, nil
	}
	if w.Epoch, err = strconv.ParseInt(e, 10, 64); err == nil {
		w.Counter, err = strconv.ParseInt(c, 10, 64)
	}
	if err != nil {
		return Watermark{}, false, fmt.Errorf("ledger: watermark of %s: %w", m.Name, err)
	}
	return w, true, nil
}

// AdvanceWatermark moves master m's watermark from read (what ReadWatermark
// returned, had its ok) to counter next, under the ledger's durability
// policy: an error means Redis did not acknowledge it as the policy wants,
// and it must not be recorded outside Redis. A key created here gets a new
// random epoch. It is ErrWatermarkMoved if the watermark is no longer
// read, and ErrFenced if a reconciler with a newer fence advanced it.
func (l *Ledger) AdvanceWatermark(ctx context.Context, m Master, read Watermark, had bool, next, fence int64) (Watermark, error) {
	if next <= read.Counter {
		return Watermark{}, fmt.Errorf("ledger: watermark of %s: next %d is not past %d", m.Name, next, read.Counter)
	}
	hadArg := 0
	if had {
		hadArg = 1
	}
	res, err := l.runScript(ctx, watermarkScript, []string{m.key}, fence, hadArg, read.Epoch, read.Counter, next, newEpoch())
	if err != nil {
		return Watermark{}, fmt.Errorf("ledger: watermark of %s: %w", m.Name, err)
	}
	if len(res) != 3 {
		return Watermark{}, fmt.Errorf("ledger: watermark of %s: reply %v", m.Name, res)
	}
	w := Watermark{Epoch: res[1], Counter: res[2]}
	switch res[0] {
	case watermarkAdvanced:
		return w, nil
	case watermarkFenced:
		return w, fmt.Errorf("ledger: watermark of %s: %w", m.Name, ErrFenced)
	}
	return w, fmt.Errorf("ledger: watermark of %s is %s, read %s: %w", m.Name, w, read, ErrWatermarkMoved)
}

// newEpoch draws a key incarnation: 52 random bits, never 0.
func newEpoch() int64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return int64(binary.LittleEndian.Uint64(b[:])>>12) | 1
}
