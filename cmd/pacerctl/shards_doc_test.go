package main

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/lease"
)

// docs/OPERATIONS.md's advice on --shards quotes the shard bounds and how
// many leases of a campaign a daemon holds at once: the figures it is
// reasoned from stay the code's.
func TestOperationsQuotesTheShardBounds(t *testing.T) {
	ops, err := os.ReadFile("../../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(ops)), " ") // line breaks as spaces
	for _, want := range []string{
		fmt.Sprintf("`--shards N` (1 to %d; new campaigns %d)", lease.MaxShards, lease.DefaultShards),
		fmt.Sprintf("A daemon holds at most %d leases of a campaign at once", bucket.MaxFeeds),
		fmt.Sprintf("Keep N at most %d per daemon", 2*bucket.MaxFeeds),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("docs/OPERATIONS.md does not say %q", want)
		}
	}
}
