// Package history is a model-based checker for money, in the spirit of
// Jepsen's and porcupine's history checkers, simplified to what a budget needs.
// Load generators record every SPEND and REFUND answer they get (Recorder);
// Check then verifies, per campaign-day, what the clients were told against
// the budget the test planned and against the ledger:
//
//   - overspend: the clients' net allowed (allowed − refunded) is at most the
//     day's limit, counted by the clients, never by the ledger;
//   - uncharged: every :1 was charged: the clients' net allowed is at most what
//     the ledger counts as spent or leased for the day;
//   - conservation: every shard balances and the shards add up to the day's
//     budget record (lease.Ledger.CheckDay);
//   - plan: once nothing is leased, the day's budget in the ledger is the one
//     the test planned.
//
// Counting rule for auction ids: a SPEND answered :1 with an auction id counts
// once per id until a REFUND of that id is accepted; the next :1 for that id
// counts again (it must be a new charge). A repeated :1 without a refund in
// between is the daemon replaying its first answer and is not counted.
package history

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pacer/pacer/lease"
)

// Call is one SPEND or REFUND and the answer the client got.
type Call struct {
	At     time.Time
	Client string // which daemon (or generator) answered
	// Campaign and Day are the campaign-day the client attributes the call
	// to: for a SPEND, the campaign's local date at the call; for a REFUND,
	// the date of the auction it refunds.
	Campaign string
	Day      string
	Auction  string // "" for a call without an auction id
	Amount   int64
	Refund   bool
	// OK: the SPEND was answered :1 (allowed), or the REFUND was accepted.
	OK     bool
	Answer string // the answer as the client saw it, for the report
}

// DayKey names a campaign-day.
type DayKey struct{ Campaign, Day string }

func (k DayKey) String() string { return k.Campaign + "/" + k.Day }

type event struct {
	seq      int
	call     *Call
	note     string
	campaign string // of a note; "" concerns every campaign
	at       time.Time
}

// Recorder collects a history. The zero value is ready; it is safe for
// concurrent use, and the order of Record calls is the history's order.
type Recorder struct {
	mu     sync.Mutex
	events []event
}

// Record appends a call and its answer.
func (r *Recorder) Record(c Call) {
	r.mu.Lock()
	r.events = append(r.events, event{seq: len(r.events) + 1, call: &c, at: c.At})
	r.mu.Unlock()
}

// Notef appends a note (an operator action, a fault, a failover) that the
// report shows among the calls of campaign ("" for every campaign).
func (r *Recorder) Notef(at time.Time, campaign, format string, args ...any) {
	r.mu.Lock()
	r.events = append(r.events, event{seq: len(r.events) + 1, note: fmt.Sprintf(format, args...), campaign: campaign, at: at})
	r.mu.Unlock()
}

// Len returns how many events (calls and notes) were recorded.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

// Calls returns how many calls were recorded.
func (r *Recorder) Calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.call != nil {
			n++
		}
	}
	return n
}

// Tally is what the clients were told over one campaign-day.
type Tally struct {
	Allowed    int64 // counted :1 micros (replays excluded)
	Replayed   int64 // :1 micros for an auction id already counted and not refunded
	Refunded   int64 // accepted refunds
	Spends     int   // SPEND calls
	Refunds    int   // REFUND calls
	MaxNet     int64 // the highest net the day reached during the history
	firstOver  int   // index of the event where net first exceeded the limit
	overAmount int64
	overLimit  int64 // the limit in force there
}

// Net is what the clients spent over the day: allowed − refunded.
func (t Tally) Net() int64 { return t.Allowed - t.Refunded }

// DayPlan is what a test planned for one campaign-day.
type DayPlan struct {
	// Limit is the most the clients may net over the day: the budget, with
	// the raises, cuts and carry-over the test performed (a cut that came
	// after budget had been handed out cannot take that back: the test
	// raises the limit to what was out at the cut).
	Limit int64
	// Earlier are the limits in force before the test changed the day's
	// budget, oldest first: the events recorded before Until (Recorder.Len
	// when the change was made) are held to Limit of the first entry whose
	// Until is above them; later events to Limit. A cut takes effect from
	// when it is made: what the clients netted before it was within the
	// budget then, and later refunds can lower what is out at the cut below
	// that (model seed 14).
	Earlier []EarlierLimit
	// Budget is the day's budget as the operator last set it (0: Limit).
	// Once nothing of the day is leased, the ledger's budget for the day
	// (its shards plus moves in flight) must not exceed the larger of
	// Budget and what the day spent: a cut below what was handed out is
	// completed as leases come back.
	Budget int64
	// Exact: once nothing of the day is leased, the ledger's budget must
	// equal Budget. Tests set it for days without carry-over and without
	// cuts below what was handed out.
	Exact bool
	// CarryIn: the previous local date of the campaign may carry what it
	// did not spend into this day. Limit and Budget grow by the previous
	// day's limit minus what its clients netted (never less than 0): a
	// bound computed from the clients' counts, not from the ledger's carry.
	CarryIn bool
	// Restored: the test put the day's shards back to an older copy (Redis
	// lost writes it had acknowledged). The ledger then names the loss
	// (CheckDay's "lost acknowledged writes", not a violation here), and
	// what the fleet's re-assertion found leased or spent twice, Shortfall
	// (the ledger owes it, and restores the budget by it), is the bound the
	// docs/GUARANTEES.md states: the day may net up to Limit + Shortfall.
	// The re-assertion measures its shortfall after the shard took back
	// what refunds returned to it, so the net of a moment may exceed
	// Limit + Shortfall by the day's refunds still to come: had they not
	// come, the shortfall would be that much larger (model seed 2670, with
	// restores 4x as often: a SPEND of 60,000 from forgotten budget, half
	// refunded before the re-assertion found a shortfall of 8,575). The
	// check at each event of a restored day counts them.
	Restored  bool
	Shortfall int64
}

// EarlierLimit is a day's limit before a change (DayPlan.Earlier).
type EarlierLimit struct {
	Until int // events recorded before this many (Recorder.Len) were held to Limit
	Limit int64
}

// limitAt is the limit in force for the event at index i of the history.
func (p DayPlan) limitAt(i int) int64 {
	for _, e := range p.Earlier {
		if i < e.Until {
			return e.Limit
		}
	}
	return p.Limit
}

// effective applies carry-over to the plans, oldest day first.
func effective(plans map[DayKey]DayPlan, days map[DayKey]*Tally) map[DayKey]DayPlan {
	out := make(map[DayKey]DayPlan, len(plans))
	keys := make([]DayKey, 0, len(plans))
	for k, p := range plans {
		if p.Budget == 0 {
			p.Budget = p.Limit
		}
		if p.Shortfall > 0 {
			p.Limit += p.Shortfall
			p.Budget += p.Shortfall
			p.Earlier = slices.Clone(p.Earlier)
			for i := range p.Earlier {
				p.Earlier[i].Limit += p.Shortfall
			}
			p.Exact = false
		}
		out[k] = p
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b DayKey) int { return strings.Compare(a.Day, b.Day) })
	for _, k := range keys {
		p := out[k]
		if !p.CarryIn {
			continue
		}
		d, err := time.Parse("2006-01-02", k.Day)
		if err != nil {
			continue
		}
		prevKey := DayKey{k.Campaign, d.AddDate(0, 0, -1).Format("2006-01-02")}
		prev, ok := out[prevKey]
		if !ok {
			continue
		}
		var net int64
		if t := days[prevKey]; t != nil {
			net = t.Net()
		}
		extra := max(0, prev.Limit-net)
		p.Limit += extra
		p.Earlier = slices.Clone(p.Earlier)
		for i := range p.Earlier {
			p.Earlier[i].Limit += extra
		}
		p.Budget += extra
		out[k] = p
	}
	return out
}

// Options says what Check compares the history with.
type Options struct {
	// Label names the history in the report ("seed 42").
	Label string
	// Plans holds every campaign-day the history touches. A day the clients
	// spent on without a plan is a violation: the test must say.
	Plans map[DayKey]DayPlan
	// Ledger, if set, is read for the uncharged, conservation and plan
	// checks.
	Ledger *lease.Ledger
	// ExtraDays are checked for conservation besides those in the history.
	ExtraDays []DayKey
	// Excerpt is how many events a violation's excerpt shows (default 40).
	Excerpt int
}

// Violation is one broken rule.
type Violation struct {
	Kind    string // overspend, uncharged, conservation, plan, no-plan
	Day     DayKey
	Detail  string
	Excerpt []string
}

// Report is Check's result.
type Report struct {
	Label      string
	Calls      int
	Days       map[DayKey]Tally
	Violations []Violation
}

// Kinds returns the kinds of the violations found, sorted, without repeats.
func (r Report) Kinds() []string {
	var k []string
	for _, v := range r.Violations {
		k = append(k, v.Kind)
	}
	slices.Sort(k)
	return slices.Compact(k)
}

// Err returns nil for a clean history, else every violation with its excerpt.
func (r Report) Err() error {
	if len(r.Violations) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d violation(s) in a history of %d calls", r.Label, len(r.Violations), r.Calls)
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "\n[%s] %s: %s", v.Kind, v.Day, v.Detail)
		if len(v.Excerpt) > 0 {
			b.WriteString("\n  history:")
			for _, l := range v.Excerpt {
				b.WriteString("\n    " + l)
			}
		}
	}
	return fmt.Errorf("%s", b.String())
}

// tally counts the history by the package's rules and annotates each call.
func tally(events []event, plans map[DayKey]DayPlan) (map[DayKey]*Tally, []string) {
	days := map[DayKey]*Tally{}
	toCome := refundsOfRestored(events, plans)
	notes := make([]string, len(events))
	type idKey struct{ campaign, auction string }
	charged := map[idKey]bool{}
	for i, e := range events {
		c := e.call
		if c == nil {
			continue
		}
		k := DayKey{c.Campaign, c.Day}
		t := days[k]
		if t == nil {
			t = &Tally{firstOver: -1}
			days[k] = t
		}
		id := idKey{c.Campaign, c.Auction}
		switch {
		case !c.Refund:
			t.Spends++
			if !c.OK {
				break
			}
			if c.Auction != "" && charged[id] {
				t.Replayed += c.Amount
				notes[i] = "replay, not counted"
				break
			}
			t.Allowed += c.Amount
			if c.Auction != "" {
				charged[id] = true
			}
			notes[i] = "counted"
		default:
			t.Refunds++
			if !c.OK {
				break
			}
			t.Refunded += c.Amount
			if _, restored := toCome[k]; restored {
				toCome[k] -= c.Amount
			}
			if c.Auction != "" {
				charged[id] = false
			}
			notes[i] = "refund counted"
		}
		net := t.Net()
		t.MaxNet = max(t.MaxNet, net)
		if p, ok := plans[k]; ok && t.firstOver < 0 {
			if limit := p.limitAt(i) + toCome[k]; net > limit {
				t.firstOver, t.overAmount, t.overLimit = i, net, limit
			}
		}
	}
	return days, notes
}

// refundsOfRestored is the refunds accepted on each restored day of plans
// (DayPlan.Restored): tally counts down from them the refunds still to come.
func refundsOfRestored(events []event, plans map[DayKey]DayPlan) map[DayKey]int64 {
	out := map[DayKey]int64{}
	for _, e := range events {
		if c := e.call; c != nil && c.Refund && c.OK {
			if k := (DayKey{c.Campaign, c.Day}); plans[k].Restored {
				out[k] += c.Amount
			}
		}
	}
	return out
}

// Check checks the recorded history. An error is a failure to read the
// ledger, not a violation.
func Check(ctx context.Context, r *Recorder, opt Options) (Report, error) {
	if opt.Excerpt <= 0 {
		opt.Excerpt = 40
	}
	r.mu.Lock()
	events := slices.Clone(r.events)
	r.mu.Unlock()
	first, _ := tally(events, nil)
	plans := effective(opt.Plans, first)
	days, notes := tally(events, plans)
	c := &checker{opt: opt, events: events, notes: notes, rep: Report{Label: opt.Label, Days: map[DayKey]Tally{}}}
	for _, e := range events {
		if e.call != nil {
			c.rep.Calls++
		}
	}
	keys := make([]DayKey, 0, len(days))
	for k, t := range days {
		c.rep.Days[k] = *t
		keys = append(keys, k)
	}
	for _, k := range opt.ExtraDays {
		if _, ok := days[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b DayKey) int { return strings.Compare(a.String(), b.String()) })
	for _, k := range keys {
		d := checkedDay{key: k, tally: days[k]}
		d.plan, d.planned = plans[k]
		c.checkClients(d)
		if opt.Ledger == nil {
			continue
		}
		if err := c.checkLedger(ctx, d); err != nil {
			return c.rep, fmt.Errorf("history: check %s: %w", k, err)
		}
	}
	return c.rep, nil
}

// checker builds one Check's report.
type checker struct {
	opt    Options
	events []event
	notes  []string
	rep    Report
}

// checkedDay is one campaign-day under check: its clients' tally (nil if
// they made no call on it) and its plan.
type checkedDay struct {
	key     DayKey
	tally   *Tally
	plan    DayPlan
	planned bool
}

func (d checkedDay) allowed() int64 {
	if d.tally == nil {
		return 0
	}
	return d.tally.Allowed
}

func (c *checker) add(kind string, k DayKey, at int, detail string, args ...any) {
	c.rep.Violations = append(c.rep.Violations, Violation{Kind: kind, Day: k,
		Detail: fmt.Sprintf(detail, args...), Excerpt: excerpt(c.events, c.notes, k, at, c.opt.Excerpt)})
}

// checkClients checks what the clients were told against the plan alone.
func (c *checker) checkClients(d checkedDay) {
	t, k := d.tally, d.key
	if d.allowed() > 0 && !d.planned {
		c.add("no-plan", k, -1, "clients were allowed %d micros on a day the test has no plan for", t.Allowed)
	}
	if t != nil && d.planned && t.firstOver >= 0 {
		c.add("overspend", k, t.firstOver, "clients netted %d micros over a limit of %d at event #%d: overspend %d (over the day: allowed %d, refunded %d, replays not counted %d; the day's limit now %d)",
			t.overAmount, t.overLimit, c.events[t.firstOver].seq, t.overAmount-t.overLimit, t.Allowed, t.Refunded, t.Replayed, d.plan.Limit)
	}
}

// checkLedger checks the day against the ledger: conservation, every :1
// charged, and the plan once nothing is leased.
func (c *checker) checkLedger(ctx context.Context, d checkedDay) error {
	k, l := d.key, c.opt.Ledger
	total, problems, err := l.CheckDay(ctx, k.Campaign, k.Day)
	if err != nil {
		return err
	}
	n, err := l.DayShards(ctx, k.Campaign, k.Day)
	if err != nil {
		return err
	}
	for _, pr := range unexpected(d.plan, problems) {
		c.add("conservation", k, -1, "%s", pr)
	}
	if n == 0 {
		if d.allowed() > 0 {
			c.add("uncharged", k, -1, "clients were allowed %d micros on a day the ledger never opened", d.allowed())
		}
		return nil
	}
	if t := d.tally; t != nil && t.Net() > total.Spent+total.Leased {
		c.add("uncharged", k, -1, "clients netted %d micros but the ledger counts %d spent + %d leased = %d: %d micros answered :1 without a charge",
			t.Net(), total.Spent, total.Leased, total.Spent+total.Leased, t.Net()-total.Spent-total.Leased)
	}
	if !d.planned || total.Leased != 0 {
		return nil
	}
	return c.checkPlan(ctx, d, total, n)
}

// checkPlan compares the ledger's budget, once nothing is leased, with the
// plan: exactly it, or at most the larger of it and what was spent.
func (c *checker) checkPlan(ctx context.Context, d checkedDay, total lease.Shard, n int) error {
	k, p := d.key, d.plan
	pending, err := c.opt.Ledger.PendingMoves(ctx, k.Campaign, k.Day, n)
	if err != nil {
		return err
	}
	budget := total.Budget
	for _, m := range pending {
		budget += m.Amount
	}
	switch {
	case p.Exact && budget != p.Budget:
		c.add("plan", k, -1, "nothing leased, and the ledger's budget is %d (shards %d + moves in flight %d), not the %d planned (off by %+d)",
			budget, total.Budget, budget-total.Budget, p.Budget, budget-p.Budget)
	case budget > max(p.Budget, total.Spent):
		c.add("plan", k, -1, "nothing leased, and the ledger's budget is %d: above both the planned %d and what was spent %d (over-funded by %d)",
			budget, p.Budget, total.Spent, budget-max(p.Budget, total.Spent))
	}
	return nil
}

// unexpected drops from a day's ledger problems the loss a restore the test
// made is named by (DayPlan.Restored).
func unexpected(p DayPlan, problems []lease.Problem) []lease.Problem {
	if !p.Restored {
		return problems
	}
	var out []lease.Problem
	for _, pr := range problems {
		if !strings.Contains(pr.What, "lost acknowledged writes") {
			out = append(out, pr)
		}
	}
	return out
}

// excerpt renders the events of campaign-day k (and the notes of its
// campaign) around event at. Without an event to point at (a violation found
// in the ledger), it shows the end of the history, leaving out denied SPENDs
// and refused REFUNDs, which change no money.
func excerpt(events []event, notes []string, k DayKey, at, n int) []string {
	var idx []int
	for i, e := range events {
		switch {
		case e.call != nil && e.call.Campaign == k.Campaign && e.call.Day == k.Day && (at >= 0 || e.call.OK):
		case e.call == nil && (e.campaign == "" || e.campaign == k.Campaign):
		default:
			continue
		}
		idx = append(idx, i)
	}
	end := len(idx)
	if at >= 0 {
		end, _ = slices.BinarySearch(idx, at)
		end = min(end+5, len(idx))
	}
	start := max(0, end-n)
	out := make([]string, 0, end-start+1)
	if start > 0 {
		out = append(out, fmt.Sprintf("... %d earlier events", start))
	}
	for _, i := range idx[start:end] {
		e := events[i]
		mark := " "
		if i == at {
			mark = ">"
		}
		ts := e.at.UTC().Format("01-02 15:04:05.000")
		if e.call == nil {
			out = append(out, fmt.Sprintf("%s#%-5d %s  -- %s", mark, e.seq, ts, e.note))
			continue
		}
		c := e.call
		verb, id := "SPEND ", ""
		if c.Refund {
			verb = "REFUND"
		}
		if c.Auction != "" {
			id = " id=" + c.Auction
		}
		line := fmt.Sprintf("%s#%-5d %s  %-8s %s %s day=%s%s %d -> %s", mark, e.seq, ts, c.Client, verb, c.Campaign, c.Day, id, c.Amount, c.Answer)
		if notes[i] != "" {
			line += " (" + notes[i] + ")"
		}
		out = append(out, line)
	}
	return out
}
