package lease

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The reconciler's indexes. Every shard has its own keys, so a reconciler that
// had to look at each shard to find work would cost Redis commands in
// proportion to campaigns. Instead the ledger scripts themselves record, in
// the same atomic call that changes a shard, what the reconciler will have to
// do about it:
//
//	due  zset  shard -> the latest expiry of a lease granted on it (ZADD GT):
//	           once that plus the grace has passed, every lease on the shard
//	           has expired and a settle call finds all that is to settle;
//	           settle removes the entry when nothing is leased any more.
//	low  zset  shard -> when a grant or renewal left it less than one
//	           request's worth to grant (ZADD NX): a shard to refill from
//	           its richest sibling, or a campaign-day that is exhausted.
//
// Redis Cluster: a script may only touch keys of one slot, and one global
// index key would be in another slot than most shards. So on a Cluster there
// is one index key per slot, named with a hash tag that maps to that slot
// (slotTag), and every script gets the index keys of its shard's slot: the
// index write is part of the shard's atomic change, never lost apart from
// it, and never an extra command on the daemons' hot path. A single server
// or a Sentinel-managed primary has one index key of each kind.
//
// Anchors: so that the reconciler need not read 16,384 index keys of each
// kind to find the few with entries, 64 anchor keys (a zset each: slot ->
// when its entries next need the reconciler) say which slots have entries.
// Anchor g's hash tag maps to slot 256g. A script that adds an entry new to
// its slot's index (ZADD returned 1) also records the slot, in the same
// atomic call, in the first anchor its own master serves, trying g = slot /
// 256, g+1, … in turn (allow-cross-slot-keys permits keys of other slots on
// the same master; pcall answers a non-local one with an error): with the
// entry's expiry, or 0 for a low flag, and ZADD LT, so that an anchor's
// score is never above the earliest time its slot's entries need the
// reconciler. A master serving a run of at least 256 slots serves anchor g
// or g+1 of each of them. The reconciler reads the 64 anchors (AnchoredSlots),
// reads the index keys of the slots due, and after its work calls Reanchor on
// them, which sets the score exactly (or removes the slot) in one script on
// the slot's master, atomic with the ledger scripts there.
//
// An entry no anchor records (written by a previous release's daemon, or on
// a master that serves no anchor) is found by Reanchor on a rotating slice of
// all slots, every slot once per sweep period; the reconciler then reads
// every slot's index keys for a sweep period (reconcile, indexPlan).
//
// A shard opened before the index existed, or an index entry lost with a
// failover to a lagging replica, is found by the reconciler's slow sweep,
// which looks at every campaign once per sweep period.
const (
	dueIndex    = keyPrefix + "idx:due"
	lowIndex    = keyPrefix + "idx:low"
	anchorIndex = keyPrefix + "idx:slots"
)

// scriptKeys is a shard's keys and its slot's index keys, in the order the
// scripts expect (the index keys are KEYS[8] and KEYS[9]).
func (l *Ledger) scriptKeys(k ShardKey) []string {
	due, low := l.indexKeys(k)
	return append(append(k.keys(), due, low), k.fairKeys()...)
}

func (l *Ledger) indexKeys(k ShardKey) (due, low string) {
	if !l.cluster {
		return dueIndex, lowIndex
	}
	tag := slotTags()[Slot(k.String())]
	return dueIndex + ":{" + tag + "}", lowIndex + ":{" + tag + "}"
}

// indexKeyList returns the index keys of a kind the reconciler reads: on a
// Cluster, those of slots, or of every slot if slots is nil.
func (l *Ledger) indexKeyList(base string, slots []int) []string {
	if !l.cluster {
		return []string{base}
	}
	tags := slotTags()
	if slots == nil {
		slots = make([]int, len(tags))
		for i := range slots {
			slots[i] = i
		}
	}
	out := make([]string, 0, len(slots))
	for _, s := range slots {
		if s >= 0 && s < len(tags) {
			out = append(out, base+":{"+tags[s]+"}")
		}
	}
	return out
}

// IsCluster reports whether the ledger keeps its indexes per slot (its
// client is a Redis Cluster's).
func (l *Ledger) IsCluster() bool { return l.cluster }

// Slots is how many hash slots a Redis Cluster has.
const Slots = 16384

// IndexSlots adds to set the Cluster slots whose index keys hold the
// entries of shards (set[slot] = true).
func IndexSlots(set map[int]bool, shards ...ShardKey) {
	for _, k := range shards {
		set[Slot(k.String())] = true
	}
}

// Slot is the Redis Cluster hash slot of a hash tag's content (CRC16/XMODEM
// mod 16384).
func Slot(tag string) int { return int(crc16(tag) % 16384) }

var (
	slotTagsOnce sync.Once
	slotTagList  []string
)

// slotTags returns, for each of the 16,384 slots, a short string hashing to
// it: the hash tag of that slot's index keys.
func slotTags() []string {
	slotTagsOnce.Do(func() {
		tags := make([]string, 16384)
		for i, left := 0, 16384; left > 0; i++ {
			s := strconv.Itoa(i)
			if sl := Slot(s); tags[sl] == "" {
				tags[sl] = s
				left--
			}
		}
		slotTagList = tags
	})
	return slotTagList
}

var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

func crc16(s string) uint16 {
	var c uint16
	for i := 0; i < len(s); i++ {
		c = c<<8 ^ crcTable[byte(c>>8)^s[i]]
	}
	return c
}

// parseIndexMember reads back the shard an index entry names (its state key).
func parseIndexMember(m string) (ShardKey, bool) {
	in, ok := strings.CutPrefix(m, keyPrefix+"{")
	if !ok {
		return ShardKey{}, false
	}
	in, ok = strings.CutSuffix(in, "}:state")
	if !ok {
		return ShardKey{}, false
	}
	c, rest, ok1 := strings.Cut(in, "/")
	d, s, ok2 := strings.Cut(rest, "/")
	n, err := strconv.Atoi(s)
	if !ok1 || !ok2 || err != nil || n < 0 || !ValidCampaignID(c) {
		return ShardKey{}, false
	}
	return ShardKey{Campaign: c, Day: d, Shard: n}, true
}

// IndexEntry is one shard found in a reconciler index, with its score there
// (milliseconds: an expiry or the time it was flagged).
type IndexEntry struct {
	Shard ShardKey
	Score int64
	key   string
	raw   string
}

func (l *Ledger) readIndex(ctx context.Context, base string, slots []int, limit int64, byScore func(p redis.Cmdable, key string) *redis.ZSliceCmd) ([]IndexEntry, error) {
	keys := l.indexKeyList(base, slots)
	if len(keys) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.ZSliceCmd, len(keys))
	if len(keys) == 1 {
		cmds[0] = byScore(l.rdb, keys[0])
	} else {
		p := l.rdb.Pipeline()
		for i, k := range keys {
			cmds[i] = byScore(p, k)
		}
		if _, err := p.Exec(ctx); err != nil {
			return nil, fmt.Errorf("ledger index %s: %w", base, err)
		}
	}
	var out []IndexEntry
	for i, c := range cmds {
		zs, err := c.Result()
		if err != nil {
			return nil, fmt.Errorf("ledger index %s: %w", keys[i], err)
		}
		for _, z := range zs {
			m, _ := z.Member.(string)
			k, ok := parseIndexMember(m)
			if !ok {
				continue // not ours: never acted on
			}
			out = append(out, IndexEntry{Shard: k, Score: int64(z.Score), key: keys[i], raw: m})
			if int64(len(out)) >= limit {
				return out, nil
			}
		}
	}
	return out, nil
}

// DueShards returns up to limit shards each of whose leases expired before
// cutoff (pass now less the grace): the shards a settle call has work on.
func (l *Ledger) DueShards(ctx context.Context, cutoff time.Time, limit int) ([]IndexEntry, error) {
	return l.DueShardsIn(ctx, cutoff, limit, nil)
}

// DueShardsIn is DueShards reading, on a Cluster, only the index keys of
// slots (nil: all). A single server has one index key: slots is ignored.
func (l *Ledger) DueShardsIn(ctx context.Context, cutoff time.Time, limit int, slots []int) ([]IndexEntry, error) {
	max := "(" + strconv.FormatInt(cutoff.UnixMilli(), 10)
	return l.readIndex(ctx, dueIndex, slots, int64(limit), func(p redis.Cmdable, key string) *redis.ZSliceCmd {
		return p.ZRangeByScoreWithScores(ctx, key, &redis.ZRangeBy{Min: "-inf", Max: max, Count: int64(limit)})
	})
}

// Unindex removes entries DueShards or LowShards returned, each only if its
// score is unchanged since (a shard flagged again stays flagged): for
// entries whose shard is gone (its day's keys expired) or has been dealt
// with.
func (l *Ledger) Unindex(ctx context.Context, entries []IndexEntry) error {
	return l.ClearLow(ctx, entries)
}

// LowShards returns up to limit shards flagged as nearly empty by a grant
// or renewal (see ClearLow).
func (l *Ledger) LowShards(ctx context.Context, limit int) ([]IndexEntry, error) {
	return l.LowShardsIn(ctx, limit, nil)
}

// LowShardsIn is LowShards reading, on a Cluster, only the index keys of
// slots (nil: all).
func (l *Ledger) LowShardsIn(ctx context.Context, limit int, slots []int) ([]IndexEntry, error) {
	return l.readIndex(ctx, lowIndex, slots, int64(limit), func(p redis.Cmdable, key string) *redis.ZSliceCmd {
		return p.ZRangeByScoreWithScores(ctx, key, &redis.ZRangeBy{Min: "-inf", Max: "+inf", Count: int64(limit)})
	})
}

//go:embed lua/unflag.lua
var luaUnflag string

var unflagScript = redis.NewScript(luaUnflag)

// ClearLow removes entries LowShards returned, each only if it was not
// flagged again since (its score is unchanged): a shard found low after the
// reconciler looked is looked at again next pass.
func (l *Ledger) ClearLow(ctx context.Context, entries []IndexEntry) error {
	byKey := map[string][]any{}
	for _, e := range entries {
		byKey[e.key] = append(byKey[e.key], e.raw, e.Score)
	}
	for key, args := range byKey {
		if err := unflagScript.Run(ctx, l.rdb, []string{key}, args...).Err(); err != nil {
			return fmt.Errorf("ledger index %s: clear: %w", key, err)
		}
	}
	return nil
}

// ReadShards returns a campaign-day's n shards, read in one pipeline.
func (l *Ledger) ReadShards(ctx context.Context, campaign, day string, n int) ([]Shard, error) {
	p := l.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, n)
	for i := range n {
		cmds[i] = p.HMGet(ctx, ShardKey{campaign, day, i}.keys()[0], shardFields...)
	}
	if _, err := p.Exec(ctx); err != nil {
		return nil, fmt.Errorf("ledger %s/%s: read shards: %w", campaign, day, err)
	}
	out := make([]Shard, n)
	for i, c := range cmds {
		sh, err := parseShard(c.Val())
		if err != nil {
			return nil, fmt.Errorf("ledger %s: %w", ShardKey{campaign, day, i}, err)
		}
		out[i] = sh
	}
	return out, nil
}

// anchorGroups is how many anchors there are; anchor g's tag maps to slot
// g × Slots/anchorGroups. prelude.lua lists the same tags.
const anchorGroups = 64

// anchorKeys returns the anchors' keys, anchor 0 first.
func anchorKeys() []string {
	tags := slotTags()
	out := make([]string, anchorGroups)
	for g := range out {
		out[g] = anchorIndex + ":{" + tags[g*(Slots/anchorGroups)] + "}"
	}
	return out
}

// anchorOrder returns the anchors in the order the ledger scripts try them
// for an entry on slot: from the slot's group on, around.
func anchorOrder(slot int) []string {
	keys := anchorKeys()
	g := slot / (Slots / anchorGroups)
	out := make([]string, len(keys))
	for j := range keys {
		out[j] = keys[(g+j)%len(keys)]
	}
	return out
}

// AnchoredSlots returns the Cluster slots whose anchors say their index
// entries may need the reconciler by cutoff (pass now less the grace: a low
// flag always does), each with the anchors that list it. 64 reads,
// pipelined. On a single server it returns nothing.
func (l *Ledger) AnchoredSlots(ctx context.Context, cutoff time.Time) (map[int][]string, error) {
	if !l.cluster {
		return nil, nil
	}
	keys := anchorKeys()
	p := l.rdb.Pipeline()
	cmds := make([]*redis.StringSliceCmd, len(keys))
	max := strconv.FormatInt(cutoff.UnixMilli(), 10)
	for i, k := range keys {
		cmds[i] = p.ZRangeByScore(ctx, k, &redis.ZRangeBy{Min: "-inf", Max: max})
	}
	if _, err := p.Exec(ctx); err != nil {
		return nil, fmt.Errorf("ledger anchors: %w", err)
	}
	out := map[int][]string{}
	for i, c := range cmds {
		for _, m := range c.Val() {
			if s, err := strconv.Atoi(m); err == nil && s >= 0 && s < Slots {
				out[s] = append(out[s], keys[i])
			}
		}
	}
	return out, nil
}

//go:embed lua/reanchor.lua
var luaReanchor string

var reanchorScript = redis.NewScript(luaReanchor)

// SlotAnchor is what Reanchor found on a slot.
type SlotAnchor struct {
	Slot int
	// Entries: the slot's index keys have entries.
	Entries bool
	// Unrecorded: they did, and no anchor on the slot's master recorded
	// the slot (a previous release's write, or an anchor lost), or the
	// master serves no anchor (Local false).
	Unrecorded bool
	// Local: the slot's master serves an anchor, which now holds the slot
	// exactly (or not at all, without entries).
	Local bool
}

// Reanchor sets, for each slot, its anchor on the slot's own master to
// exactly when its index entries next need the reconciler, or removes the
// slot from it when it has none (one script call a slot, pipelined); then
// removes the slot from the anchors listed[slot] names other than that one
// (a slot recorded before its master changed). A slot whose master serves
// no anchor keeps every listing.
func (l *Ledger) Reanchor(ctx context.Context, slots []int, listed map[int][]string) ([]SlotAnchor, error) {
	if !l.cluster || len(slots) == 0 {
		return nil, nil
	}
	cmds, err := l.reanchorCalls(ctx, slots, false)
	if err != nil {
		return nil, err
	}
	var retry []int
	for i, c := range cmds {
		if c.Err() != nil && redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			retry = append(retry, i)
		}
	}
	if len(retry) > 0 {
		again := make([]int, len(retry))
		for j, i := range retry {
			again[j] = slots[i]
		}
		redo, err := l.reanchorCalls(ctx, again, true)
		if err != nil {
			return nil, err
		}
		for j, i := range retry {
			cmds[i] = redo[j]
		}
	}
	out := make([]SlotAnchor, len(slots))
	p := l.rdb.Pipeline()
	drops := 0
	for i, c := range cmds {
		v, err := c.Int64Slice()
		if err != nil || len(v) != 3 {
			return nil, fmt.Errorf("ledger anchors: reanchor slot %d: %v %w", slots[i], v, err)
		}
		a := SlotAnchor{Slot: slots[i], Entries: v[2] == 1, Local: v[0] > 0}
		a.Unrecorded = a.Entries && (!a.Local || v[1] == 1)
		out[i] = a
		if !a.Local {
			continue
		}
		own := anchorOrder(slots[i])[v[0]-1]
		for _, k := range listed[slots[i]] {
			if k != own {
				p.ZRem(ctx, k, strconv.Itoa(slots[i]))
				drops++
			}
		}
	}
	if drops > 0 {
		if _, err := p.Exec(ctx); err != nil {
			return nil, fmt.Errorf("ledger anchors: %w", err)
		}
	}
	return out, nil
}

// reanchorCalls runs the reanchor script on slots in one pipeline, by its
// hash (or its body: eval), and returns each call's reply.
func (l *Ledger) reanchorCalls(ctx context.Context, slots []int, eval bool) ([]*redis.Cmd, error) {
	p := l.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(slots))
	for i, s := range slots {
		keys := []string{l.indexKeyList(dueIndex, []int{s})[0], l.indexKeyList(lowIndex, []int{s})[0]}
		if eval {
			cmds[i] = reanchorScript.Eval(ctx, p, keys, s)
		} else {
			cmds[i] = reanchorScript.EvalSha(ctx, p, keys, s)
		}
	}
	if _, err := p.Exec(ctx); err != nil && !redis.HasErrorPrefix(err, "NOSCRIPT") {
		return nil, fmt.Errorf("ledger anchors: reanchor: %w", err)
	}
	return cmds, nil
}
