package lease

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/trim.lua
var luaTrim string

var trimScript = redis.NewScript(luaTrim)

// AuditStreams lists the shards of every campaign-day the ledger still holds
// (every day of every campaign whose shards were all opened), in campaign,
// day and shard order: the audit streams an exporter reads. Its cost is one
// SMEMBERS and one pipelined HGETALL per campaign.
func (l *Ledger) AuditStreams(ctx context.Context) ([]ShardKey, error) {
	ids, err := l.CampaignIDs(ctx)
	if err != nil {
		return nil, err
	}
	slices.Sort(ids)
	p := l.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = p.HGetAll(ctx, daysKey(id))
	}
	if len(ids) > 0 {
		if _, err := p.Exec(ctx); err != nil {
			return nil, fmt.Errorf("ledger: days of %d campaigns: %w", len(ids), err)
		}
	}
	var out []ShardKey
	for i, id := range ids {
		days := cmds[i].Val()
		names := make([]string, 0, len(days))
		for d := range days {
			if !strings.Contains(d, ":") {
				names = append(names, d)
			}
		}
		slices.Sort(names)
		for _, d := range names {
			n, err := strconv.Atoi(days[d])
			if err != nil || n < 1 {
				return nil, fmt.Errorf("ledger %s/%s: bad day marker %q", id, d, days[d])
			}
			for s := range n {
				out = append(out, ShardKey{id, d, s})
			}
		}
	}
	return out, nil
}

// ParseAuditKey is AuditKey's inverse: the shard whose audit stream key is
// key, or false.
func ParseAuditKey(key string) (ShardKey, bool) {
	tag, ok := strings.CutPrefix(key, keyPrefix+"{")
	if !ok {
		return ShardKey{}, false
	}
	tag, ok = strings.CutSuffix(tag, "}:audit")
	if !ok {
		return ShardKey{}, false
	}
	parts := strings.Split(tag, "/")
	if len(parts) != 3 || !ValidCampaignID(parts[0]) {
		return ShardKey{}, false
	}
	n, err := strconv.Atoi(parts[2])
	if err != nil || n < 0 {
		return ShardKey{}, false
	}
	return ShardKey{parts[0], parts[1], n}, true
}

// TrimAudit drops what every consumer group of the shard's audit stream has
// acknowledged (XTRIM MINID, trim.lua), and returns how many entries went and
// the MINID used ("" when the stream has no group: then the ledger's own cap,
// Config.AuditMaxLen, bounds it, and nothing is trimmed here). An entry
// delivered to a consumer and not acknowledged, or not yet delivered to some
// group, is never trimmed: an exporter acknowledges an entry only once its row
// is committed, so nothing is trimmed that was not exported.
func (l *Ledger) TrimAudit(ctx context.Context, k ShardKey) (trimmed int64, minID string, err error) {
	v, err := trimScript.Run(ctx, l.rdb, []string{k.AuditKey()}).Slice()
	if err != nil {
		return 0, "", fmt.Errorf("ledger %s: trim audit: %w", k, err)
	}
	if len(v) != 2 {
		return 0, "", fmt.Errorf("ledger %s: trim audit: reply %v", k, v)
	}
	n, _ := v[0].(int64)
	id, _ := v[1].(string)
	return n, id, nil
}

// AuditEvents returns how many events the shard has written to its audit
// stream, ever (its r_events counter plus rp's events, kept in the same
// script as each XADD), and false if the shard has no counters (expired, or
// opened by a version before them).
func (l *Ledger) AuditEvents(ctx context.Context, k ShardKey) (int64, bool, error) {
	v, err := l.rdb.HMGet(ctx, k.keys()[0], "r_events", "rp").Result()
	if err != nil {
		return 0, false, fmt.Errorf("ledger %s: events counter: %w", k, err)
	}
	s, _ := v[0].(string)
	if s == "" {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("ledger %s: events counter r_events is %q", k, s)
	}
	if rp, _ := v[1].(string); rp != "" {
		c, err := parsePacked(k, rp)
		if err != nil {
			return 0, false, err
		}
		n += c[0]
	}
	return n, true, nil
}

// ShardReport is one shard's report counters (the fields BuildReport sums
// over a day's shards); ok is false if the shard has none (expired, or
// opened by a version before them). Outstanding, UnderDelivery and
// CarriedOver are left zero.
func (l *Ledger) ShardReport(ctx context.Context, k ShardKey) (r Report, ok bool, err error) {
	v, err := l.rdb.HMGet(ctx, k.keys()[0], reportFields...).Result()
	if err != nil {
		return Report{}, false, fmt.Errorf("ledger %s: report counters: %w", k, err)
	}
	if len(v) != len(reportFields) || v[0] == nil {
		return Report{}, false, nil
	}
	f, err := parseReportFields(k, v)
	if err != nil {
		return Report{}, false, err
	}
	return Report{Campaign: k.Campaign, Day: k.Day, Events: f[0], Budget: f[1], Leases: f[2], Spent: f[4],
		Returned: f[5], Settled: f[7], Lost: f[8]}, true, nil
}
