package clocktest

import (
	"sync"
	"testing"
	"time"
)

func TestManualMovesOnlyWhenMoved(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	c := At(t0)
	if got := c.Now(); !got.Equal(t0) {
		t.Fatalf("Now = %v; want %v", got, t0)
	}
	if got := c.Add(90 * time.Second); !got.Equal(t0.Add(90*time.Second)) || !c.Now().Equal(got) {
		t.Fatalf("Add returned %v, Now %v; want %v", got, c.Now(), t0.Add(90*time.Second))
	}
	c.Set(t0.Add(-time.Hour))
	if got := c.Now(); !got.Equal(t0.Add(-time.Hour)) {
		t.Fatalf("after Set back an hour, Now = %v", got)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				c.Add(time.Millisecond)
			}
		})
	}
	wg.Wait()
	if got := c.Now(); !got.Equal(t0.Add(-time.Hour + 8*time.Second)) {
		t.Fatalf("8 goroutines adding 1000 ms each: Now = %v; want %v", got, t0.Add(-time.Hour+8*time.Second))
	}
}
