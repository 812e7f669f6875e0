package bucket_test

import (
	"fmt"
	"time"

	"github.com/pacer/pacer/bucket"
)

func ExampleCurve_AtTime() {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		panic(err)
	}
	flat := bucket.Flat(24)
	// 2026-03-08 is a 23-hour day in New York: the curve shrinks with it,
	// so by local noon 11/23 of the day, not half, has been released.
	for _, key := range []string{"2026-03-08", "2026-07-01", "2026-11-01"} {
		day, err := bucket.ParseDayKey(key, ny)
		if err != nil {
			panic(err)
		}
		noon := time.Date(day.Start.Year(), day.Start.Month(), day.Start.Day(), 12, 0, 0, 0, ny)
		fmt.Printf("%s: %v long, %d PPB released by noon\n", day.Key, day.Length(), flat.AtTime(noon, day))
	}
	// Output:
	// 2026-03-08: 23h0m0s long, 478260873 PPB released by noon
	// 2026-07-01: 24h0m0s long, 500000004 PPB released by noon
	// 2026-11-01: 25h0m0s long, 520000004 PPB released by noon
}

func ExampleNewCurve() {
	// Nothing overnight, a morning ramp, an afternoon peak, a busy evening.
	w := make([]float64, 24)
	for h := range w {
		w[h] = []float64{0, 1, 3, 2}[h/6]
	}
	c, err := bucket.NewCurve("daytime", w)
	if err != nil {
		panic(err)
	}
	for _, h := range []time.Duration{6, 9, 12, 18, 24} {
		fmt.Printf("%02d:00 %5.1f%%\n", h, float64(c.At(h*time.Hour, 24*time.Hour))*100/float64(bucket.PPB))
	}

	w[3] = -1
	_, err = bucket.NewCurve("daytime", w)
	fmt.Println(err)
	// Output:
	// 06:00   0.0%
	// 09:00   8.3%
	// 12:00  16.7%
	// 18:00  66.7%
	// 24:00 100.0%
	// bucket: curve "daytime": slot 3: weight -1 is negative
}

func ExampleBucket() {
	t0 := time.Date(2026, 3, 8, 12, 0, 0, 0, time.UTC)
	b := bucket.New(5_000_000) // bursts of at most 5 currency units

	// A lease of 60 units, spendable for one minute: 1 unit a second.
	err := b.AddGrant(t0, bucket.Grant{ID: "lease-1", Amount: 60_000_000, Start: t0, End: t0.Add(time.Minute)})
	if err != nil {
		panic(err)
	}
	fmt.Println("at 0s, spend 1 unit:", b.Spend(t0, 1_000_000))
	fmt.Println("at 2s, spend 1 unit:", b.Spend(t0.Add(2*time.Second), 1_000_000))
	fmt.Println("at 2s, spend 2 units:", b.Spend(t0.Add(2*time.Second), 2_000_000))

	// Past the lease's end its remaining tokens are no longer spendable;
	// they go back to the ledger with the undripped rest.
	for _, c := range b.Expire(t0.Add(90 * time.Second)) {
		fmt.Printf("%s closed: %d of %d micros unused\n", c.ID, c.Unused, c.Amount)
	}
	s := b.Stats(t0.Add(90 * time.Second))
	fmt.Printf("spent %d, returned %d, tokens %d\n", s.Spent, s.Returned, s.Tokens)
	// Output:
	// at 0s, spend 1 unit: false
	// at 2s, spend 1 unit: true
	// at 2s, spend 2 units: false
	// lease-1 closed: 59000000 of 60000000 micros unused
	// spent 1000000, returned 59000000, tokens 0
}
