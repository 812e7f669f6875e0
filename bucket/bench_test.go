package bucket

import (
	"fmt"
	"testing"
	"time"
)

// benchBucket is a bucket as a busy host holds it: a current lease and its
// overlapping renewal, dripping faster than the benchmark spends.
func benchBucket(b *testing.B) *Bucket {
	now := time.Now()
	bk := New(1 << 50)
	for i, start := range []time.Time{now.Add(-time.Hour), now} {
		g := Grant{ID: fmt.Sprint("lease-", i), Amount: 1 << 60, Start: start, End: start.Add(2 * time.Hour)}
		if err := bk.AddGrant(now, g); err != nil {
			b.Fatal(err)
		}
	}
	return bk
}

// BenchmarkSpend is the SPEND hot path, including the clock read the
// daemon does for each request.
func BenchmarkSpend(b *testing.B) {
	bk := benchBucket(b)
	b.ReportAllocs()
	for b.Loop() {
		if !bk.Spend(time.Now(), 1) {
			b.Fatal("denied")
		}
	}
}

// BenchmarkSpendParallel is one campaign's bucket hammered by every
// connection at once: the worst case for its mutex.
func BenchmarkSpendParallel(b *testing.B) {
	bk := benchBucket(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if !bk.Spend(time.Now(), 1) {
				b.Error("denied")
				return
			}
		}
	})
}

func BenchmarkCurveAt(b *testing.B) {
	c := Flat(1440)
	var e time.Duration
	for b.Loop() {
		e = (e + 7919*time.Millisecond) % (25 * time.Hour)
		c.At(e, 25*time.Hour)
	}
}

// BenchmarkSpendFixedClock is Spend alone, with the clock stepped by 1µs
// instead of read: the package's own cost. On VMs whose clock source is
// slow, time.Now (see BenchmarkTimeNow) can cost more than Spend itself.
func BenchmarkSpendFixedClock(b *testing.B) {
	bk := benchBucket(b)
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Microsecond)
		if !bk.Spend(now, 1) {
			b.Fatal("denied")
		}
	}
}

// BenchmarkTimeNow is the clock read inside BenchmarkSpend, to subtract.
func BenchmarkTimeNow(b *testing.B) {
	var t time.Time
	for b.Loop() {
		t = time.Now()
	}
	_ = t
}
