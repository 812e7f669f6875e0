package lease

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The grant statuses the Go side names are the ones grant.lua's header
// lists, each with the meaning the constant's name gives it, and renew.lua
// answers its grant half with the same.
func TestGrantStatusesMatchTheScripts(t *testing.T) {
	src, err := os.ReadFile("lua/grant.lua")
	if err != nil {
		t.Fatal(err)
	}
	var header strings.Builder
	for _, line := range strings.Split(string(src), "\n") {
		if !strings.HasPrefix(line, "--") {
			break
		}
		header.WriteString(strings.TrimPrefix(line, "--"))
	}
	text := strings.Join(strings.Fields(header.String()), " ")
	i := strings.Index(text, "status 0")
	if i < 0 {
		t.Fatalf("grant.lua's header lists no statuses: %q", text)
	}
	listed := map[int64]string{}
	parts := regexp.MustCompile(`(-?\d+) ([^,;]+)`).FindAllStringSubmatch(text[i+len("status "):], -1)
	for _, m := range parts {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		if _, dup := listed[n]; !dup {
			listed[n] = m[2]
		}
	}
	want := map[int64]string{
		grantNew: "granted now", grantRetried: "already granted", grantClosed: "lease already closed",
		grantDayShut: "day is closed", grantFrozen: "frozen", grantDiverged: "known history",
		grantHeld: "held by a budget cut", grantIDTaken: "another holder",
	}
	for n, words := range want {
		if got, ok := listed[n]; !ok || !strings.Contains(got, words) {
			t.Errorf("grant status %d: the script says %q; the Go side means %q", n, got, words)
		}
		if refused := grantRefusal(n); (refused == nil) != (n == grantNew || n == grantRetried) {
			t.Errorf("grant status %d: refusal %v", n, refused)
		}
	}
	for n, words := range listed {
		if _, ok := want[n]; !ok && n >= 0 {
			t.Errorf("grant.lua lists status %d (%s), which the Go side does not name", n, words)
		}
	}
	renew, err := os.ReadFile("lua/renew.lua")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(renew), "new_status as grant's status") {
		t.Error("renew.lua's header no longer says its grant half answers with grant's statuses")
	}
}

// Grant and Renew send the same arguments for the same request, renew's
// after the ending lease's and before its refunded, and then, with
// Config.PackedCounters on, packed (one argument more): one argument list,
// in the scripts' ARGV order.
func TestGrantArgumentsFollowTheScriptsHeaders(t *testing.T) {
	l := &Ledger{}
	args := l.grantArgs(GrantRequest{LeaseID: "l", Holder: "h"})
	if n := len((&Ledger{cfg: Config{PackedCounters: true}}).packedArg(args)); n != len(args)+1 {
		t.Errorf("packed: %d arguments, want %d", n, len(args)+1)
	}
	if n := len(l.packedArg(args)); n != len(args) {
		t.Errorf("not packed: %d arguments, want %d", n, len(args))
	}
	for _, script := range []struct {
		file       string
		skip, tail int
		last       string
	}{{"lua/grant.lua", 0, 1, "packed"}, {"lua/renew.lua", 2, 2, "refunded packed"}, {"lua/release.lua", 0, 0, "refunded packed"}} {
		src, err := os.ReadFile(script.file)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^-- ARGV: (.*)$`).FindStringSubmatch(string(src))
		if m == nil {
			t.Fatalf("%s has no ARGV line", script.file)
		}
		names := strings.Fields(strings.NewReplacer("[", " ", "]", " ").Replace(m[1]))
		if got := len(names) - script.skip - script.tail; script.file != "lua/release.lua" && got != len(args) {
			t.Errorf("%s takes %d grant arguments (%v); grantArgs sends %d", script.file, got, names[script.skip:len(names)-script.tail], len(args))
		}
		last := strings.Fields(script.last)
		if got := names[len(names)-len(last):]; !slices.Equal(got, last) {
			t.Errorf("%s's last arguments are %v; the ledger sends %v last", script.file, got, last)
		}
	}
}
