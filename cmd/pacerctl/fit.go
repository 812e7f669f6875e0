package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/config"
	"github.com/pacer/pacer/lease"
)

// demandSlots is how many slots of a local day the daemons count demand in:
// 15 minutes each on a 24-hour day, stretched or shrunk on DST days as
// curves are.
const demandSlots = 96

// demandKey is the Redis hash where daemons flush a campaign-day's observed
// demand: fields req:<slot> (SPEND requests), ok:<slot> (allowed),
// no:<slot> (denied) and reqm:<slot> (micros requested), slot 0 to 95.
func demandKey(campaign, day string) string { return lease.DemandKey(campaign, day) }

// fitOptions tune fitCurve.
type fitOptions struct {
	Slots  int     // the fitted curve's slot count
	Smooth int     // half-width of the moving average, in input slots; < 0: default
	Min    float64 // least share of a slot, times the mean share (0 < Min <= 1)
	Max    float64 // largest share of a slot, times the mean share (Max >= 1)
}

// defaultSmooth is the moving average's half-width for n input slots: one
// slot of 24 or 48, two of 96 (30 minutes), thirty of 1440.
func defaultSmooth(n int) int { return max(1, n/48) }

// fitCurve turns demand per slot of a local day (24, 48, 96 or 1440 slots,
// summed over the days observed) into a curve of o.Slots slots:
//
//  1. smoothed by a circular triangular moving average (the day wraps:
//     23:45 is next to 00:00), half-width o.Smooth slots;
//  2. normalised to shares that sum to 1;
//  3. bounded: each share is clip(c*share, Min/n, Max/n) with the one
//     scale c that makes them sum to 1 again (found by bisection: this is
//     the fixed point of clipping and renormalising until nothing moves), so
//     no slot is starved, a zero-demand slot gets the floor, and none takes an
//     extreme share;
//  4. resampled to o.Slots by summing (fewer slots) or splitting evenly
//     (more), which keeps the bounds relative to the mean share.
//
// It returns the curve and its weights (shares summing to 1).
func fitCurve(name string, demand []float64, o fitOptions) (*bucket.Curve, []float64, error) {
	n := len(demand)
	if !validSlotCount(n) {
		return nil, nil, fmt.Errorf("%d slots of demand; want 24, 48, 96 or 1440", n)
	}
	if !validSlotCount(o.Slots) {
		return nil, nil, fmt.Errorf("%d slots for the curve; want 24, 48, 96 or 1440", o.Slots)
	}
	if !(o.Min > 0 && o.Min <= 1) || !(o.Max >= 1) {
		return nil, nil, fmt.Errorf("bounds %vx to %vx the mean share: want 0 < min <= 1 <= max", o.Min, o.Max)
	}
	var total float64
	for i, d := range demand {
		if d < 0 || math.IsNaN(d) || math.IsInf(d, 0) {
			return nil, nil, fmt.Errorf("slot %d: demand %v: want a finite number >= 0", i, d)
		}
		total += d
	}
	if total == 0 {
		return nil, nil, errors.New("no demand observed: every slot is 0")
	}
	h := o.Smooth
	if h < 0 {
		h = defaultSmooth(n)
	}
	shares := normalise(smooth(demand, h))
	shares = bound(shares, o.Min/float64(n), o.Max/float64(n))
	weights := resample(shares, o.Slots)
	c, err := bucket.NewCurve(name, weights)
	if err != nil {
		return nil, nil, err
	}
	return c, weights, nil
}

func validSlotCount(n int) bool { return n == 24 || n == 48 || n == 96 || n == 1440 }

// smooth returns the circular moving average of x with triangular weights
// h+1-|k| for k in [-h, h].
func smooth(x []float64, h int) []float64 {
	n := len(x)
	h = min(h, (n-1)/2)
	out := make([]float64, n)
	for i := range x {
		var sum, wsum float64
		for k := -h; k <= h; k++ {
			w := float64(h + 1 - abs(k))
			sum += w * x[((i+k)%n+n)%n]
			wsum += w
		}
		out[i] = sum / wsum
	}
	return out
}

func abs(k int) int {
	if k < 0 {
		return -k
	}
	return k
}

func normalise(x []float64) []float64 {
	var sum float64
	for _, v := range x {
		sum += v
	}
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v / sum
	}
	return out
}

// bound returns shares (summing to 1) clipped to [lo, hi] and rescaled so
// they still sum to 1: clip(c*s, lo, hi) for the scale c that makes the sum
// 1. The sum is continuous and non-decreasing in c, n*lo <= 1 at c = 0, so
// bisection finds c. If even the largest c falls short (nearly all demand in
// a few slots, many slots empty), those few get hi and the empty slots share
// the rest equally, which lies between lo and hi.
func bound(shares []float64, lo, hi float64) []float64 {
	n := len(shares)
	minPos := math.Inf(1)
	for _, s := range shares {
		if s > 0 {
			minPos = min(minPos, s)
		}
	}
	clipped := func(c float64) ([]float64, float64) {
		out := make([]float64, n)
		var sum float64
		for i, s := range shares {
			out[i] = min(max(c*s, lo), hi)
			sum += out[i]
		}
		return out, sum
	}
	cMax := hi / minPos // every positive share clips to hi
	out, sum := clipped(cMax)
	if sum < 1 {
		zeros := 0
		for _, s := range shares {
			if s == 0 {
				zeros++
			}
		}
		rest := (1 - float64(n-zeros)*hi) / float64(zeros)
		for i, s := range shares {
			if s == 0 {
				out[i] = rest
			}
		}
		return out
	}
	cLo, cHi := 0.0, cMax
	for range 200 {
		mid := (cLo + cHi) / 2
		if _, s := clipped(mid); s < 1 {
			cLo = mid
		} else {
			cHi = mid
		}
	}
	out, _ = clipped(cHi)
	return normalise(out) // removes the last rounding; moves a share by ~1e-16
}

// resample sums groups of slots (to fewer slots) or splits each evenly (to
// more). Every valid slot count divides or is divided by every other.
func resample(x []float64, slots int) []float64 {
	n := len(x)
	out := make([]float64, slots)
	if slots <= n {
		per := n / slots
		for i, v := range x {
			out[i/per] += v
		}
		return out
	}
	per := slots / n
	for i := range out {
		out[i] = x[i/per] / float64(per)
	}
	return out
}

// readDemandCSV reads demand per slot from CSV: an optional header line,
// then one row per slot, "slot,requests" or "hour,requests" (the header's
// first column says which; without a header two-column rows are slots), or
// a single column of values in slot order. # starts a comment. Rows may
// come in any order, each slot exactly once.
func readDemandCSV(r io.Reader) ([]float64, error) {
	cr := csv.NewReader(r)
	cr.Comment = '#'
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	recs, err := cr.ReadAll()
	if err != nil {
		return nil, err
	}
	index := "slot"
	if len(recs) > 0 {
		last := strings.TrimSpace(recs[0][len(recs[0])-1])
		if _, err := strconv.ParseFloat(last, 64); err != nil { // a header
			if len(recs[0]) == 2 {
				index = strings.ToLower(strings.TrimSpace(recs[0][0]))
				if index != "slot" && index != "hour" {
					return nil, fmt.Errorf("line 1: header %q: want slot,requests or hour,requests", strings.Join(recs[0], ","))
				}
			}
			recs = recs[1:]
		}
	}
	n := len(recs)
	if !validSlotCount(n) {
		return nil, fmt.Errorf("%d rows; want 24, 48, 96 or 1440 (one per slot of the day)", n)
	}
	if index == "hour" && n != 24 {
		return nil, fmt.Errorf("%d rows of hours; want 24 (hours 0 to 23), or use slot,requests", n)
	}
	demand := make([]float64, n)
	seen := make([]bool, n)
	for i, rec := range recs {
		slot := i
		var value string
		switch len(rec) {
		case 1:
			if index == "hour" {
				return nil, fmt.Errorf("row %d: want %s,requests", i+1, index)
			}
			value = rec[0]
		case 2:
			s, err := strconv.Atoi(strings.TrimSpace(rec[0]))
			if err != nil || s < 0 || s >= n {
				return nil, fmt.Errorf("row %d: %s %q: want an integer from 0 to %d", i+1, index, rec[0], n-1)
			}
			slot, value = s, rec[1]
		default:
			return nil, fmt.Errorf("row %d: %d columns; want %s,requests", i+1, len(rec), index)
		}
		if seen[slot] {
			return nil, fmt.Errorf("row %d: %s %d given twice", i+1, index, slot)
		}
		seen[slot] = true
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("row %d: requests %q: want a finite number >= 0", i+1, value)
		}
		demand[slot] = v
	}
	return demand, nil
}

// curveName makes a curve name from s: lower case, [a-z0-9_-], with -fit.
func curveName(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	name := strings.Trim(b.String(), "-")
	if len(name) > 60 {
		name = name[:60]
	}
	if name == "" {
		return "fitted"
	}
	return name + "-fit"
}

// observedDemand is what the demand hashes of a campaign held.
type observedDemand struct {
	Days              []string
	Req               []float64 // per slot, summed over Days
	Requests, Allowed int64
	Denied            int64
}

// readDemand sums the demand hashes of the days complete local days before
// now's (days without a hash are skipped).
func readDemand(ctx context.Context, l *lease.Ledger, c lease.Campaign, now time.Time, days int) (observedDemand, error) {
	obs := observedDemand{Req: make([]float64, demandSlots)}
	loc := c.Location()
	day := bucket.DayOf(now, loc)
	for range days {
		day = bucket.DayOf(day.Start.Add(-time.Hour), loc)
		key := demandKey(c.ID, day.Key)
		h, err := l.Client().HGetAll(ctx, key).Result()
		if err != nil {
			return obs, fmt.Errorf("read %s: %w", key, err)
		}
		if len(h) == 0 {
			continue
		}
		obs.Days = append(obs.Days, day.Key)
		for field, value := range h {
			kind, slotStr, ok := strings.Cut(field, ":")
			slot, err := strconv.Atoi(slotStr)
			if !ok || err != nil || slot < 0 || slot >= demandSlots {
				return obs, fmt.Errorf("%s: field %q: want req:, ok:, no: or reqm: and a slot from 0 to %d", key, field, demandSlots-1)
			}
			v, err := strconv.ParseInt(value, 10, 64)
			if err != nil || v < 0 {
				return obs, fmt.Errorf("%s: field %s is %q, not a count", key, field, value)
			}
			switch kind {
			case "req":
				obs.Req[slot] += float64(v)
				obs.Requests += v
			case "ok":
				obs.Allowed += v
			case "no":
				obs.Denied += v
			case "reqm":
			default:
				return obs, fmt.Errorf("%s: unknown field %q", key, field)
			}
		}
	}
	// Oldest first, for the description.
	for i, j := 0, len(obs.Days)-1; i < j; i, j = i+1, j-1 {
		obs.Days[i], obs.Days[j] = obs.Days[j], obs.Days[i]
	}
	return obs, nil
}

func (a *app) curveFit(ctx context.Context, args []string) error {
	const synopsis = "<campaign>|--from-csv FILE [--days N] [--slots N] [--name NAME] [--out FILE]"
	flags := newFlagSet("curve fit")
	fromCSV := flags.String("from-csv", "", "read demand per slot from this CSV file instead of Redis")
	days := flags.Int("days", 7, "complete local days of observed demand to use (from Redis)")
	slots := flags.Int("slots", 24, "slots of the fitted curve: 24, 48, 96 or 1440")
	name := flags.String("name", "", "the curve's name (default: the campaign's or the file's, with -fit)")
	out := flags.String("out", "", "write the curve file here (default: stdout)")
	smoothFlag := flags.Int("smooth", -1, "moving-average half-width in input slots (0: none; default 1 for 24 or 48 slots, 2 for 96, 30 for 1440)")
	minF := flags.Float64("min", 0.2, "least share of a slot, times the mean share (0 < min <= 1)")
	maxF := flags.Float64("max", 5, "largest share of a slot, times the mean share (>= 1)")
	pos, err := a.parseArgs(flags, args, synopsis)
	if err != nil {
		return err
	}
	switch {
	case *fromCSV == "" && len(pos) != 1:
		return usagef("curve fit: want a campaign id or --from-csv FILE")
	case *fromCSV != "" && len(pos) != 0:
		return usagef("curve fit: want a campaign id or --from-csv FILE, not both")
	case *days < 1 || *days > 366:
		return usagef("curve fit: --days %d: want 1 to 366", *days)
	case !validSlotCount(*slots):
		return usagef("curve fit: --slots %d: want 24, 48, 96 or 1440", *slots)
	case !(*minF > 0 && *minF <= 1):
		return usagef("curve fit: --min %v: want 0 < min <= 1", *minF)
	case !(*maxF >= 1) || math.IsInf(*maxF, 0):
		return usagef("curve fit: --max %v: want a number >= 1", *maxF)
	case *name != "" && !curveNamePattern.MatchString(*name):
		return usagef("curve fit: --name %q: want 1 to 64 characters from [a-z0-9_-]", *name)
	case *name == config.FlatCurve:
		return usagef("curve fit: --name %s is the built-in constant-rate curve; choose another name", config.FlatCurve)
	}

	var demand []float64
	var source, summary string
	if *fromCSV != "" {
		f, err := os.Open(*fromCSV)
		if err != nil {
			return err
		}
		demand, err = readDemandCSV(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", *fromCSV, err)
		}
		if *name == "" {
			*name = curveName(strings.TrimSuffix(filepath.Base(*fromCSV), filepath.Ext(*fromCSV)))
		}
		source = "demand in " + filepath.Base(*fromCSV)
		summary = fmt.Sprintf("%d slots of demand from %s", len(demand), *fromCSV)
	} else {
		l, c, err := a.loadCampaign(ctx, "curve fit", pos)
		if err != nil {
			return err
		}
		id := c.ID
		obs, err := readDemand(ctx, l, c, a.now(), *days)
		if err != nil {
			return err
		}
		if len(obs.Days) == 0 {
			span := "in the last complete day"
			if *days > 1 {
				span = fmt.Sprintf("in the last %d complete days", *days)
			}
			return fmt.Errorf("no demand recorded for campaign %s %s (%s, days in %s): a curve is fitted from whole local days before today, "+
				"so a campaign started today has none yet; come back tomorrow, or fit from a file with --from-csv",
				id, span, demandKey(id, "<day>"), c.TZ)
		}
		if obs.Requests == 0 {
			return fmt.Errorf("campaign %s had no SPEND requests on %s", id, strings.Join(obs.Days, ", "))
		}
		demand = obs.Req
		if *name == "" {
			*name = curveName(id)
		}
		span := obs.Days[0]
		if len(obs.Days) > 1 {
			span += ".." + obs.Days[len(obs.Days)-1]
		}
		source = fmt.Sprintf("the SPEND requests of campaign %s on %d days, %s (%s)", id, len(obs.Days), span, c.TZ)
		summary = fmt.Sprintf("%d SPEND requests of campaign %s on %d of the last %d days (%s), %s allowed",
			obs.Requests, id, len(obs.Days), *days, span, percentOf(obs.Allowed, obs.Requests))
	}

	smoothing := *smoothFlag
	if smoothing < 0 {
		smoothing = defaultSmooth(len(demand))
	}
	c, _, err := fitCurve(*name, demand, fitOptions{Slots: *slots, Smooth: smoothing, Min: *minF, Max: *maxF})
	if err != nil {
		return err
	}
	desc := fmt.Sprintf("fitted by pacerctl curve fit to %s; smoothed over +-%d of its %d slots, each slot bounded to %gx-%gx the mean share",
		source, smoothing, len(demand), *minF, *maxF)
	data, err := config.MarshalCurve(c, desc)
	if err != nil {
		return err
	}
	// The summary goes where the curve does not.
	info := a.stdout
	if *out == "" {
		info = a.stderr
		if _, err := a.stdout.Write(data); err != nil {
			return err
		}
	} else if err := writeFileAtomic(*out, data); err != nil {
		return err
	}
	s := summarize(c)
	fmt.Fprintf(info, "curve %s: %d slots fitted to %s; peak slot %d (%s-%s) with %s of the day\n  %s\n",
		c.Name(), c.Slots(), summary, s.PeakSlot, s.PeakStart, s.PeakEnd, percent(s.PeakSharePPB), sparkline(shares(c)))
	if *out != "" {
		fmt.Fprintf(info, "wrote %s\n", *out)
		if base := filepath.Base(*out); base != c.Name()+".yaml" {
			a.warnf("%s: a curves directory needs the file named %s.yaml", base, c.Name())
		}
	}
	return nil
}

// writeFileAtomic writes data to a temporary file beside path and renames
// it into place, so a reader never sees half a curve.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	_, err = io.Copy(f, bytes.NewReader(data))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
