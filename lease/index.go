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
// it, and never an extra command on the daemons' hot path. The reconciler
// then reads 16,384 index keys of each kind per pass, pipelined: a constant
// (about 8 ms of each master's time per pass on a 3-master Cluster), not a
// cost per campaign. A single server or a Sentinel-managed primary has one
// index key of each kind. A reconciler that knows few campaigns reads only
// the slots their shards hash to (DueShardsIn, LowShardsIn, IndexSlots),
// plus a rotating slice of all of them.
//
// A shard opened before the index existed, or an index entry lost with a
// failover to a lagging replica, is found by the reconciler's slow sweep,
// which looks at every campaign once per sweep period.
const (
	dueIndex = keyPrefix + "idx:due"
	lowIndex = keyPrefix + "idx:low"
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
