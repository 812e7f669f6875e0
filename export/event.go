package export

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
)

// event is one audit-stream entry as a ledger_events row.
type event struct {
	id       streamID
	kind     string
	micros   int64 // the entry's amount (a release's lease amount, of which unused came back)
	unused   int64
	refunded int64  // a release's: bidders' refunds its holder reported with it
	ref      string // the lease, budget op, move or daemon run the entry is about
	holder   string
	at       time.Time // the ledger's time of the change (the entry's ms field)
	expiry   time.Time // a grant's or reassert's lease expiry; zero for other kinds
	// extra are the entry's fields no column holds (nil when none: every
	// grant and release), kept in ledger_events.fields.
	extra    map[string]string
	carryOut bool // an adjust that is a carry-over's take (op carry-out)
}

// streamID is a Redis stream entry id, ms-seq.
type streamID struct{ ms, seq int64 }

func (id streamID) String() string { return fmt.Sprintf("%d-%d", id.ms, id.seq) }

func (id streamID) less(o streamID) bool {
	return id.ms < o.ms || (id.ms == o.ms && id.seq < o.seq)
}

func parseStreamID(s string) (streamID, error) {
	ms, seq, ok := strings.Cut(s, "-")
	a, err1 := strconv.ParseInt(ms, 10, 64)
	b, err2 := strconv.ParseInt(seq, 10, 64)
	if !ok || err1 != nil || err2 != nil || a < 0 || b < 0 {
		return streamID{}, fmt.Errorf("bad stream id %q", s)
	}
	return streamID{a, b}, nil
}

// maxEntryMS bounds the times an entry may carry (ms, expiry): the end of
// year 9999, in ms since the Unix epoch.
const maxEntryMS = 253402300799999

// refFields name what an entry is about, by kind of entry; the first present
// wins (the others stay in extra).
var refFields = []string{"lease", "op", "move", "run"}

// parseEntry reads one audit entry. An entry that is not what the ledger's
// scripts write (an amount that is not an integer) is an error naming it:
// the stream stops there rather than skip money.
func parseEntry(k lease.ShardKey, m redis.XMessage) (event, error) {
	id, err := parseStreamID(m.ID)
	if err != nil {
		return event{}, fmt.Errorf("%s: %w", k, err)
	}
	e := event{id: id}
	var refs [4]string
	var has [4]bool
	var ms, expiry string
	var hasMS, hasExpiry bool
	for f, v := range m.Values {
		s, ok := v.(string)
		if !ok {
			return event{}, fmt.Errorf("%s entry %s: field %s is %T", k, m.ID, f, v)
		}
		switch f {
		case "ev":
			e.kind = s
		case "amount":
			e.micros, err = intField(f, s)
		case "unused":
			e.unused, err = intField(f, s)
		case "refunded":
			e.refunded, err = intField(f, s)
		case "holder":
			e.holder = s
		case "ms":
			ms, hasMS = s, true
		case "lease", "op", "move", "run":
			i := slices.Index(refFields, f)
			refs[i], has[i] = s, true
		case "expiry":
			expiry, hasExpiry = s, true
		default:
			e.setExtra(f, s)
		}
		if err != nil {
			return event{}, fmt.Errorf("%s entry %s: %w", k, m.ID, err)
		}
	}
	if err := e.check(id, refs, has, ms, hasMS, expiry, hasExpiry); err != nil {
		return event{}, fmt.Errorf("%s entry %s: %w", k, m.ID, err)
	}
	return e, nil
}

// check completes an entry parseEntry read: the time, the ref (the first of
// refFields present; the others go to extra), the expiry (a grant's or
// reassert's; any other kind's stays in extra), and what must hold of it.
func (e *event) check(id streamID, refs [4]string, has [4]bool, ms string, hasMS bool, expiry string, hasExpiry bool) error {
	if e.kind == "" {
		return errors.New("no ev field")
	}
	if e.unused < 0 || (e.kind == "release" && e.unused > e.micros) {
		return fmt.Errorf("unused %d of %d", e.unused, e.micros)
	}
	if e.refunded < 0 || (e.refunded > 0 && e.kind != "release") {
		return fmt.Errorf("refunded %d in a %s entry", e.refunded, e.kind)
	}
	at := id.ms
	if hasMS {
		var err error
		if at, err = strconv.ParseInt(ms, 10, 64); err != nil {
			return fmt.Errorf("ms %q", ms)
		}
	}
	if at < 0 || at > maxEntryMS {
		return fmt.Errorf("ms %d is not a time between 1970 and 9999", at)
	}
	e.at = time.UnixMilli(at).UTC()
	first := true
	for i, f := range refFields {
		switch {
		case has[i] && first:
			e.ref, first = refs[i], false
		case has[i]:
			e.setExtra(f, refs[i])
		}
	}
	if hasExpiry {
		if e.kind != "grant" && e.kind != "reassert" {
			e.setExtra("expiry", expiry)
		} else if x, err := strconv.ParseInt(expiry, 10, 64); err != nil || x < 0 || x > maxEntryMS {
			return fmt.Errorf("expiry %q is not a time between 1970 and 9999 in ms", expiry)
		} else {
			e.expiry = time.UnixMilli(x).UTC()
		}
	}
	e.carryOut = e.kind == "adjust" && has[1] && strings.HasPrefix(refs[1], "carry-out")
	return nil
}

func (e *event) setExtra(f, v string) {
	if e.extra == nil {
		e.extra = map[string]string{}
	}
	e.extra[f] = v
}

// appendFieldsJSON appends fields as a JSON object (key order is the map's:
// jsonb keeps its own). Strings of printable ASCII without quotes or
// backslashes, all the ledger's scripts write, are copied as they are; any
// other goes through encoding/json, which escapes it.
func appendFieldsJSON(dst []byte, fields map[string]string) []byte {
	dst = append(dst, '{')
	first := true
	for k, v := range fields {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = appendJSONString(dst, k)
		dst = append(dst, ':')
		dst = appendJSONString(dst, v)
	}
	return append(dst, '}')
}

func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			b, _ := json.Marshal(s) // a string always marshals
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

func intField(name, s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s %q is not an integer", name, s)
	}
	return n, nil
}

// Totals is what a campaign-day's (or an hour's) events add up to, counted as
// the ledger's report counters count them (lease/lua/prelude.lua, audit), in
// micros: so that SQL and the ledger can be compared field by field.
type Totals struct {
	Budget   int64 `json:"budget"`   // open + adjust (carry-over and cuts included)
	Spent    int64 `json:"spent"`    // released minus unused, plus settled, plus re-asserted runs
	Returned int64 `json:"returned"` // unused micros given back on release (bidders' refunds included)
	Refunded int64 `json:"refunded"` // bidders' refunds the daemons accepted (in Spent's net already)
	Lost     int64 `json:"lost"`     // settled from expired leases
	Carry    int64 `json:"carry"`    // taken from the day by its carry-over
	Cuts     int64 `json:"cuts"`     // taken from the day by budget cuts (carry-over not included)
	Granted  int64 `json:"granted"`
	Closed   int64 `json:"closed"` // lease micros closed by release or settlement
	Leases   int64 `json:"leases"`
	Settled  int64 `json:"settled"`
	Events   int64 `json:"events"`
}

// add counts e, and fails rather than overflow.
func (t *Totals) add(e event) error {
	var err error
	inc := func(p *int64, d int64) {
		if (d > 0 && *p > math.MaxInt64-d) || (d < 0 && *p < math.MinInt64-d) {
			err = fmt.Errorf("%s %d: totals overflow int64", e.kind, d)
			return
		}
		*p += d
	}
	inc(&t.Events, 1)
	switch e.kind {
	case "open":
		inc(&t.Budget, e.micros)
	case "adjust":
		inc(&t.Budget, e.micros)
		if e.carryOut {
			inc(&t.Carry, -e.micros)
		} else if e.micros < 0 {
			inc(&t.Cuts, -e.micros)
		}
	case "grant":
		inc(&t.Leases, 1)
		inc(&t.Granted, e.micros)
	case "release":
		inc(&t.Spent, e.micros-e.unused)
		inc(&t.Returned, e.unused)
		inc(&t.Closed, e.micros)
		inc(&t.Refunded, e.refunded)
	case "reassert_run":
		inc(&t.Spent, e.micros)
	case "settle":
		inc(&t.Settled, 1)
		inc(&t.Lost, e.micros)
		inc(&t.Spent, e.micros)
		inc(&t.Closed, e.micros)
	}
	return err
}

// values are Totals' fields in spend_days' and spend_hours' column order,
// as query arguments.
func (t *Totals) values() []any {
	cols := t.columns()
	out := make([]any, len(cols))
	for i, v := range cols {
		out[i] = v
	}
	return out
}

// columns are Totals' fields in spend_days' and spend_hours' column order.
func (t *Totals) columns() []int64 {
	return []int64{t.Budget, t.Spent, t.Returned, t.Lost, t.Carry, t.Cuts, t.Granted, t.Closed, t.Leases, t.Settled, t.Events, t.Refunded}
}

const totalsColumns = "budget, spent, returned, lost, carry, cuts, granted, closed, leases, settled, events, refunded"
