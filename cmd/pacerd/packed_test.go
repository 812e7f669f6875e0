package main

import (
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"
)

// ledger.packed_counters reaches the ledger pacerd runs with, and is off
// unless the file turns it on (the second step of an upgrade).
func TestPackedCountersReachTheLedger(t *testing.T) {
	for _, tc := range []struct {
		file string
		want bool
	}{{"", false}, {"ledger:\n  packed_counters: true\n", true}} {
		path := filepath.Join(t.TempDir(), "pacerd.yaml")
		if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
			t.Fatal(err)
		}
		o := options{configPath: path, overrides: map[string]string{}}
		cfg, err := loadConfig(o)
		if err != nil {
			t.Fatal(err)
		}
		dcfg, err := daemonConfig(cfg, o, nil, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		if got := dcfg.Links.Ledger.PackedCounters; got != tc.want {
			t.Errorf("file %q: ledger's PackedCounters %v, want %v", tc.file, got, tc.want)
		}
	}
}
