package main

import (
	"bytes"
	"context"
	"encoding/csv"
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

// fitOptions and fitCurve: the fitting lives in bucket (pacerd fits curves
// too, for campaigns whose curve is "auto").
type fitOptions = bucket.FitOptions

func fitCurve(name string, demand []float64, o fitOptions) (*bucket.Curve, []float64, error) {
	return bucket.FitCurve(name, demand, o)
}

func validSlotCount(n int) bool { return n == 24 || n == 48 || n == 96 || n == 1440 }

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
	obs := observedDemand{Req: make([]float64, lease.DemandSlots)}
	loc := c.Location()
	day := bucket.DayOf(now, loc)
	for range days {
		day = bucket.DayOf(day.Start.Add(-time.Hour), loc)
		d, ok, err := l.ReadDemand(ctx, c.ID, day.Key)
		if err != nil {
			return obs, err
		}
		if !ok {
			continue
		}
		obs.Days = append(obs.Days, day.Key)
		for slot, v := range d.Requests {
			obs.Req[slot] += float64(v)
		}
		obs.Requests += d.Total.Requests
		obs.Allowed += d.Total.Allowed
		obs.Denied += d.Total.Denied
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
	case *name != "" && !bucket.ValidCurveName(*name):
		return usagef("curve fit: --name %q: want 1 to 64 characters from [a-z0-9_-]", *name)
	case *name == config.FlatCurve:
		return usagef("curve fit: --name %s is the built-in constant-rate curve; choose another name", config.FlatCurve)
	}

	var in fitInput
	if *fromCSV != "" {
		in, err = demandFromCSV(*fromCSV)
	} else {
		in, err = a.demandFromLedger(ctx, pos, *days)
	}
	if err != nil {
		return err
	}
	demand := in.demand
	if *name == "" {
		*name = in.name
	}
	smoothing := *smoothFlag
	if smoothing < 0 {
		smoothing = bucket.DefaultSmooth(len(demand))
	}
	c, _, err := fitCurve(*name, demand, fitOptions{Slots: *slots, Smooth: smoothing, Min: *minF, Max: *maxF})
	if err != nil {
		return err
	}
	desc := fmt.Sprintf("fitted by pacerctl curve fit to %s; smoothed over +-%d of its %d slots, each slot bounded to %gx-%gx the mean share",
		in.source, smoothing, len(demand), *minF, *maxF)
	return a.writeFitted(c, desc, in.summary, *out)
}

// fitInput is the demand a curve is fitted to, where it came from (for the
// curve's description and the summary line) and the curve's default name.
type fitInput struct {
	demand          []float64
	source, summary string
	name            string
}

// demandFromCSV reads a CSV file of demand per slot.
func demandFromCSV(path string) (fitInput, error) {
	f, err := os.Open(path)
	if err != nil {
		return fitInput{}, err
	}
	defer f.Close()
	demand, err := readDemandCSV(f)
	if err != nil {
		return fitInput{}, fmt.Errorf("%s: %w", path, err)
	}
	return fitInput{demand: demand, name: curveName(strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))),
		source: "demand in " + filepath.Base(path), summary: fmt.Sprintf("%d slots of demand from %s", len(demand), path)}, nil
}

// demandFromLedger reads a campaign's SPEND requests per slot over its last
// complete local days.
func (a *app) demandFromLedger(ctx context.Context, pos []string, days int) (fitInput, error) {
	l, c, err := a.loadCampaign(ctx, "curve fit", pos)
	if err != nil {
		return fitInput{}, err
	}
	id := c.ID
	obs, err := readDemand(ctx, l, c, a.now(), days)
	if err != nil {
		return fitInput{}, err
	}
	if len(obs.Days) == 0 {
		span := "in the last complete day"
		if days > 1 {
			span = fmt.Sprintf("in the last %d complete days", days)
		}
		return fitInput{}, fmt.Errorf("no demand recorded for campaign %s %s (%s, days in %s): a curve is fitted from whole local days before today, "+
			"so a campaign started today has none yet; come back tomorrow, or fit from a file with --from-csv",
			id, span, lease.DemandKey(id, "<day>"), c.TZ)
	}
	if obs.Requests == 0 {
		return fitInput{}, fmt.Errorf("campaign %s had no SPEND requests on %s", id, strings.Join(obs.Days, ", "))
	}
	span := obs.Days[0]
	if len(obs.Days) > 1 {
		span += ".." + obs.Days[len(obs.Days)-1]
	}
	return fitInput{demand: obs.Req, name: curveName(id),
		source: fmt.Sprintf("the SPEND requests of campaign %s on %d days, %s (%s)", id, len(obs.Days), span, c.TZ),
		summary: fmt.Sprintf("%d SPEND requests of campaign %s on %d of the last %d days (%s), %s allowed",
			obs.Requests, id, len(obs.Days), days, span, percentOf(obs.Allowed, obs.Requests))}, nil
}

// writeFitted writes the curve file to out (stdout if "") and the summary
// line where the curve does not go.
func (a *app) writeFitted(c *bucket.Curve, desc, summary, out string) error {
	data, err := config.MarshalCurve(c, desc)
	if err != nil {
		return err
	}
	info := a.stdout
	if out == "" {
		info = a.stderr
		if _, err := a.stdout.Write(data); err != nil {
			return err
		}
	} else if err := writeFileAtomic(out, data); err != nil {
		return err
	}
	s := summarize(c)
	fmt.Fprintf(info, "curve %s: %d slots fitted to %s; peak slot %d (%s-%s) with %s of the day\n  %s\n",
		c.Name(), c.Slots(), summary, s.PeakSlot, s.PeakStart, s.PeakEnd, percent(s.PeakSharePPB), sparkline(shares(c)))
	if out != "" {
		fmt.Fprintf(info, "wrote %s\n", out)
		if base := filepath.Base(out); base != c.Name()+".yaml" {
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
