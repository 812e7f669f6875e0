package config

import (
	"strings"
	"testing"

	"github.com/pacer/pacer/lease"
)

func TestLedgerDurability(t *testing.T) {
	for _, tc := range []struct {
		yaml   string
		want   string // the policy, or the error's text
		assume string
	}{
		{yaml: "", want: "fsync"},
		{yaml: "ledger: {durability: replicas:2}", want: "replicas:2"},
		{yaml: "ledger: {durability: none}", want: "none"},
		{yaml: "ledger: {durability: fsync, durability_assume: fsync}", want: "fsync", assume: "fsync"},
		{yaml: "ledger: {durability: replicas:1, durability_assume: replicas:2}", want: "replicas:1", assume: "replicas:2"},
		{yaml: "ledger: {durability: always}", want: `ledger.durability: "always": want fsync, replicas:N or none`},
		{yaml: "ledger: {durability: replicas:0}", want: "ledger.durability: \"replicas:0\": want replicas:N"},
		{yaml: "ledger: {durability: fsync, durability_assume: replicas:1}", want: "ledger.durability_assume: replicas:1 does not meet ledger.durability: fsync"},
		{yaml: "ledger: {durability: replicas:2, durability_assume: replicas:1}", want: "does not meet"},
		{yaml: "ledger: {durability: none, durability_assume: fsync}", want: "must be empty with ledger.durability: none"},
		{yaml: "ledger: {durability_assume: none}", want: "none vouches for nothing"},
		{yaml: "ledger: {check_interval: 0s}", want: "ledger.check_interval: 0s: must be positive"},
		{yaml: "ledger: {durabilty: fsync}", want: `unknown key "ledger.durabilty"`},
	} {
		d, err := ParseDaemon([]byte(tc.yaml))
		if err != nil {
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%q: %v, want %q", tc.yaml, err, tc.want)
			}
			continue
		}
		want, assume, err := d.Ledger.Policy()
		if err != nil || want.String() != tc.want {
			t.Errorf("%q: policy %v, %v; want %s", tc.yaml, want, err, tc.want)
			continue
		}
		if (assume == nil) != (tc.assume == "") || assume != nil && assume.String() != tc.assume {
			t.Errorf("%q: assume %v, want %q", tc.yaml, assume, tc.assume)
		}
		if tc.want == "fsync" && want.Policy != lease.PolicyFsync {
			t.Errorf("%q: %v", tc.yaml, want)
		}
	}
}

func TestRedisSentinelAddress(t *testing.T) {
	if err := CheckRedis([]string{"sentinel://ledger@10.0.0.1:26379,10.0.0.2:26379"}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]string{
		{"sentinel://10.0.0.1:26379"},
		{"sentinel://ledger@10.0.0.1"},
		{"sentinel://ledger@10.0.0.1:1", "10.0.0.2:1"},
	} {
		if err := CheckRedis(bad); err == nil {
			t.Errorf("CheckRedis(%q) accepted", bad)
		}
	}
}
