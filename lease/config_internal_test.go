package lease

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

// docs/BENCHMARKS.md quotes the audit stream's default cap (below it, a
// lease call asks no XINFO GROUPS).
func TestAuditMaxLenDefault(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0"}) // never dialled
	defer rdb.Close()
	if got := New(rdb, Config{}, nil).cfg.AuditMaxLen; got != 1_000_000 {
		t.Fatalf("default AuditMaxLen %d, want 1,000,000 (docs/BENCHMARKS.md)", got)
	}
}
