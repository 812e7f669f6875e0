package lease

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Key layout. Each shard of a campaign-day keeps all its keys under one hash tag,
// {campaign/day/shard}, so every ledger script touches a single Redis Cluster
// slot; different shards have different tags and so spread across the cluster.
//
//	pacer:{c/d/s}:state   hash   budget locked available leased spent lost cppb fence opened_ms;
//	                             adv (the one-unit advance's ramp, prelude.lua);
//	                             hr hrel (the hour's bound: the hour, what it let out, net of what the cap took back);
//	                             r_* the day's report counters (prelude.lua's audit)
//	pacer:{c/d/s}:leases  hash   lease id -> "amount|holder|expiry_ms" (outstanding leases)
//	pacer:{c/d/s}:exp     zset   lease id by expiry_ms (for settlement)
//	pacer:{c/d/s}:done    hash   lease id -> "r:unused" | "s:amount" (idempotency record)
//	pacer:{c/d/s}:audit   stream every change to money on the shard
//	pacer:{c/d/s}:moves   hash   move id -> "out|amount|peer|pending|done" or "in|amount|peer" (rebalancing)
//	pacer:{c/d/s}:ops     hash   op id -> "applied|owed" (budget changes, exactly once)
//	pacer:{c/d/s}:fair    hash   holder -> "demand|epoch|supply" (its recent demand, micros/s, for fair shares)
//	pacer:{c/d/s}:fairexp zset   holder by when its demand is forgotten (expiry_ms)
//	pacer:campaign:{<id>} hash   campaign settings
//	pacer:campaigns       set    campaign ids
//	pacer:campaigns:changes stream ids of campaigns stored, in order (the reconciler follows it)
//	pacer:idx:due, pacer:idx:low  zsets  the reconciler's indexes (index.go); on a Cluster
//	                             one of each per slot, pacer:idx:due:{<tag of the slot>}
//	pacer:days:{<id>}     hash   day -> shard count, written once every shard of the day is open;
//	                             "<day>:plan" budget|shards|curve, decided once; "<day>:budget"
//	                             the day's budget; "<day>:op:<op>" pending|done budget changes;
//	                             "<day>:relook" until_ms, a shard of the day lost writes (relook.go)
//	pacer:dayops:{<id>}   hash   "<day>|<op>" -> delta, budget changes not yet finished
//	pacer:reconciler:pass hash   the reconciler's full pass: after (the last campaign id looked
//	                             at), done, started, campaigns, fence (sweep.go)
//	pacer:demand:<id>:<day> hash the fleet's SPENDs and micros asked per 15-minute slot (demand.go)
//	pacer:recent:{pacer:demand:<id>:<day>} hash  the fleet's micros asked by the minute, a ring
//	                             of the latest 16 (demand.go; the demand hash's Cluster slot)
//
// A campaign's settings, its days and its pending day ops share the hash tag
// {<id>}, so deciding a day's plan from the settings is one atomic script.
const keyPrefix = "pacer:"

var idPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// ValidCampaignID reports whether id can name a campaign: 1 to 128 characters
// from [A-Za-z0-9_.-]. Braces, colons and slashes would break the key layout.
func ValidCampaignID(id string) bool { return idPattern.MatchString(id) }

// ShardKey names one shard of one campaign-day.
type ShardKey struct {
	Campaign string
	Day      string // local date of the campaign's time zone, "2006-01-02"
	Shard    int
}

func (k ShardKey) String() string { return fmt.Sprintf("%s/%s/%d", k.Campaign, k.Day, k.Shard) }

func (k ShardKey) tag() string {
	return keyPrefix + "{" + k.Campaign + "/" + k.Day + "/" + strconv.Itoa(k.Shard) + "}:"
}

// keys returns the shard's keys in the order every script expects them.
func (k ShardKey) keys() []string {
	t := k.tag()
	return []string{t + "state", t + "leases", t + "exp", t + "done", t + "audit", t + "moves", t + "ops"}
}

// fairKeys are the shard's record of its holders' demand (prelude.lua's
// fair_cap): passed after the reconciler's indexes, so scripts that do not
// use them are unchanged.
func (k ShardKey) fairKeys() []string {
	t := k.tag()
	return []string{t + "fair", t + "fairexp"}
}

// RedisKeys returns the shard's Redis keys (for tools and tests that copy or
// inspect a shard as a whole).
func (k ShardKey) RedisKeys() []string { return append(k.keys(), k.fairKeys()...) }

// AuditKey is the shard's audit stream.
func (k ShardKey) AuditKey() string { return k.tag() + "audit" }

func campaignKey(id string) string { return keyPrefix + "campaign:{" + id + "}" }
func daysKey(id string) string     { return keyPrefix + "days:{" + id + "}" }
func dayOpsKey(id string) string   { return keyPrefix + "dayops:{" + id + "}" }

const campaignsKey = keyPrefix + "campaigns"

// KeyCampaign returns the campaign a ledger key belongs to, for tools that
// attribute Redis commands to campaigns (the simulator's counters): the
// shard keys pacer:{c/day/shard}:…, and pacer:campaign:{c}, pacer:days:{c},
// pacer:dayops:{c}. Other keys (the indexes, the demand hashes, the
// campaign set) give "".
func KeyCampaign(key string) string {
	rest, ok := strings.CutPrefix(key, keyPrefix)
	if !ok {
		return ""
	}
	if tag, ok := strings.CutPrefix(rest, "{"); ok {
		id, _, _ := strings.Cut(tag, "/")
		return id
	}
	for _, p := range []string{"campaign:{", "days:{", "dayops:{"} {
		if tag, ok := strings.CutPrefix(rest, p); ok {
			id, _, _ := strings.Cut(tag, "}")
			return id
		}
	}
	return ""
}
