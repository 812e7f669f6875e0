package export

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/pgtest"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
)

// The rows COPY writes (copyRows' binary encoding) are the rows INSERT …
// ON CONFLICT writes (pgx's encoding of the same events), column by column,
// for entries with what the ledger writes and with what it does not: text
// that is not ASCII, quotes, backslashes and control characters in fields no
// column holds, negative amounts, times at the edges of the range parseEntry
// accepts, a zone with half-hour offsets for the hours.
func TestCopyWritesWhatInsertWrites(t *testing.T) {
	ctx := context.Background()
	_, db := pgtest.Pool(t, pgtest.Own(t))
	if _, err := Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	kolkata, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Fatal(err)
	}
	s := &store{db: db, step: func(context.Context, string) error { return nil }, now: time.Now,
		zones: &zones{byID: map[string]*time.Location{"cé\"mp'ain": kolkata}}}
	entries := []map[string]any{
		{"ev": "open", "amount": "9223372036854775807", "ms": "0"},
		{"ev": "grant", "lease": "h1-b0-1", "holder": "hôte ✓", "amount": "5000", "expiry": strconv.FormatInt(maxEntryMS, 10), "ms": "1763719200000"},
		{"ev": "release", "lease": "h1-b0-1", "holder": "hôte ✓", "amount": "5000", "unused": "5000", "refunded": "1", "ms": "1763721000000"},
		{"ev": "adjust", "op": `cut "x" \ y`, "amount": "-9223372036854775807", "owed": "a\x01b\tc\n", "ms": strconv.FormatInt(maxEntryMS, 10)},
		{"ev": "move_out", "move": "m-1", "peer": "3", "amount": "7", "lease": "also-a-lease", "ms": "1763722800001"},
		{"ev": "freeze", "until": "17", "reason": "", "expiry": "not a grant's"},
		{"ev": "reassert_run", "run": "h1-b0", "amount": "0", "short": "-1", "ms": "1763722800002"},
	}
	var evs []event
	for i, vals := range entries {
		m := redis.XMessage{ID: "1763719200000-" + strconv.Itoa(i), Values: vals}
		e, err := parseEntry(lease.ShardKey{}, m)
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		evs = append(evs, e)
	}
	byCopy := lease.ShardKey{Campaign: "cé\"mp'ain", Day: "2026-11-21", Shard: 0}
	// Another day: the amounts at int64's edges would overflow one day's
	// totals twice over.
	byInsert := lease.ShardKey{Campaign: "cé\"mp'ain", Day: "2026-11-22", Shard: 1}
	for _, w := range []struct {
		k       lease.ShardKey
		copyNew bool
	}{{byCopy, true}, {byInsert, false}} {
		day, _ := time.Parse(time.DateOnly, w.k.Day)
		b := batch{k: w.k, day: day, loc: kolkata, evs: evs}
		if n, err := s.write(ctx, &b, w.copyNew); err != nil || n != len(evs) {
			t.Fatalf("%s: wrote %d of %d rows: %v", w.k, n, len(evs), err)
		}
	}
	var differ, rows int
	if err := db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE c IS DISTINCT FROM i), count(*) FROM
		(SELECT c.entry_ms, c.entry_seq, row(c.campaign, c.day + 1, c.kind, c.micros, c.unused, c.refunded, c.ref, c.holder, c.at, c.expiry, c.fields)::text AS c,
			row(i.campaign, i.day, i.kind, i.micros, i.unused, i.refunded, i.ref, i.holder, i.at, i.expiry, i.fields)::text AS i
		FROM ledger_events c JOIN ledger_events i USING (entry_ms, entry_seq) WHERE c.shard = 0 AND i.shard = 1) x`).Scan(&differ, &rows); err != nil {
		t.Fatal(err)
	}
	if rows != len(evs) || differ != 0 {
		t.Errorf("%d rows of each way matched by id, %d differ; want %d and 0", rows, differ, len(evs))
	}
	var holder string
	var expiryMS, atMS int64
	var noFields bool
	if err := db.QueryRow(ctx, `SELECT holder, (extract(epoch FROM expiry) * 1000)::bigint, fields IS NULL, (extract(epoch FROM at) * 1000)::bigint
		FROM ledger_events WHERE shard = 0 AND kind = 'grant' AND day = '2026-11-21'`).Scan(&holder, &expiryMS, &noFields, &atMS); err != nil {
		t.Fatal(err)
	}
	if holder != "hôte ✓" || expiryMS != maxEntryMS || !noFields || atMS != 1763719200000 {
		t.Errorf("the grant copied: holder %q, expiry %d, fields NULL %v, at %d; want %q, %d, true, 1763719200000", holder, expiryMS, noFields, atMS, "hôte ✓", int64(maxEntryMS))
	}
	var hours int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM spend_hours WHERE extract(minute FROM hour) = 30`).Scan(&hours); err != nil || hours == 0 {
		t.Errorf("spend_hours holds %d hours starting at half past (%v): Asia/Kolkata's hours were not used", hours, err)
	}
}

// An entry whose time or lease expiry is not a time PostgreSQL and the COPY
// encoding hold (before 1970, after 9999, not an integer) is refused with
// its reason: the stream stops there.
func TestParseEntryRefusesTimesOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		vals map[string]any
		want string
	}{
		{map[string]any{"ev": "open", "amount": "1", "ms": "-1"}, "ms -1 is not a time between 1970 and 9999"},
		{map[string]any{"ev": "open", "amount": "1", "ms": strconv.FormatInt(maxEntryMS+1, 10)}, "is not a time between 1970 and 9999"},
		{map[string]any{"ev": "grant", "amount": "1", "expiry": "soon"}, `expiry "soon" is not a time`},
		{map[string]any{"ev": "reassert", "amount": "1", "expiry": "253402300800000"}, `expiry "253402300800000" is not a time`},
	} {
		_, err := parseEntry(lease.ShardKey{Campaign: "c", Day: "2026-11-21"}, redis.XMessage{ID: "1-0", Values: tc.vals})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error saying %q", tc.vals, err, tc.want)
		}
	}
}
