package lease

import (
	"maps"
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
	listed := headerStatuses(t, "grant.lua")
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

// A grant's and renewal's numbers argument (callNumbers) holds as many
// doubles as the scripts' CALL_NUMBERS unpacks and grant.lua's header
// names: a number added on one side only would shift every one after it.
func TestGrantNumbersFollowTheScriptsHeader(t *testing.T) {
	args := (&Ledger{}).grantArgs(GrantRequest{LeaseID: "l", Holder: "h"})
	packed, ok := args[len(args)-1].(string)
	if !ok || len(packed)%8 != 0 {
		t.Fatalf("grantArgs' last argument is %T of %d bytes; want the numbers, 8 bytes each", args[len(args)-1], len(packed))
	}
	m := regexp.MustCompile(`(?m)^local CALL_NUMBERS = '>(d*)'$`).FindStringSubmatch(luaPrelude)
	if m == nil {
		t.Fatal("prelude.lua has no CALL_NUMBERS literal of doubles")
	}
	src, err := os.ReadFile("lua/grant.lua")
	if err != nil {
		t.Fatal(err)
	}
	h := regexp.MustCompile(`(?m)^-- numbers: CALL_NUMBERS \(prelude\.lua\): (.*)\.$`).FindStringSubmatch(string(src))
	if h == nil {
		t.Fatal("grant.lua's header does not name its numbers")
	}
	names := strings.Fields(h[1])
	if len(packed)/8 != len(m[1]) || len(names) != len(m[1]) {
		t.Errorf("grantArgs packs %d numbers, CALL_NUMBERS unpacks %d, grant.lua names %d (%v)", len(packed)/8, len(m[1]), len(names), names)
	}
	for _, f := range []string{"lua/grant.lua", "lua/renew.lua"} {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		u := regexp.MustCompile(`(?m)^local (.*) = struct\.unpack\(CALL_NUMBERS, ARGV\[\d+\]\)$`).FindStringSubmatch(string(src))
		if u == nil {
			t.Fatalf("%s does not unpack its numbers with CALL_NUMBERS", f)
		}
		if got := strings.Split(u[1], ", "); len(got) != len(names) {
			t.Errorf("%s unpacks %d numbers into %v; grant.lua's header names %d", f, len(got), got, len(names))
		}
	}
}

// headerStatuses returns the statuses a script's header lists after
// "status ": "N meaning" items separated by commas outside parentheses, up
// to the first period or semicolon outside them.
func headerStatuses(t *testing.T, script string) map[int64]string {
	t.Helper()
	src, err := os.ReadFile("lua/" + script)
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
	i := strings.Index(text, "status 0 ")
	if i < 0 {
		t.Fatalf("%s's header lists no statuses: %q", script, text)
	}
	var items []string
	depth, from := 0, i+len("status ")
	for j := from; j < len(text); j++ {
		switch c := text[j]; {
		case c == '(':
			depth++
		case c == ')':
			depth--
		case depth == 0 && c == ',':
			items = append(items, text[from:j])
			from = j + 1
		case depth == 0 && (c == ';' || c == '.'):
			items = append(items, text[from:j])
			from = len(text)
			j = len(text)
		}
	}
	if from < len(text) {
		items = append(items, text[from:])
	}
	listed := map[int64]string{}
	item := regexp.MustCompile(`^(-?\d+) (.+)$`)
	for _, it := range items {
		m := item.FindStringSubmatch(strings.TrimSpace(it))
		if m == nil {
			t.Fatalf("%s's header: status item %q is not \"N meaning\"", script, it)
		}
		n, _ := strconv.ParseInt(m[1], 10, 64)
		if _, dup := listed[n]; dup {
			t.Fatalf("%s's header lists status %d twice", script, n)
		}
		listed[n] = m[2]
	}
	return listed
}

// Every status the Go side branches on in a script's answer is one the
// script's header lists, with the meaning the constant's name gives it,
// and every status a header lists has its name on the Go side
// (lease/statuses.go).
func TestScriptStatusesMatchTheirHeaders(t *testing.T) {
	noDay := map[int64]string{statusNoDay: "no such"}
	for _, c := range []struct {
		script string
		want   map[int64]string
	}{
		{"release.lua", map[int64]string{releaseNow: "released now", releaseRetried: "released before",
			releaseSettled: "settled before", releaseUnknown: "unknown lease"}},
		{"settle.lua", map[int64]string{settleDone: "ok", statusFenced: "fenced off"}},
		{"move_out.lua", map[int64]string{moveOutNow: "moved now", moveOutRetried: "already recorded",
			statusFenced: "fenced off", statusHeld: "held by a budget cut"}},
		{"reassert.lua", map[int64]string{int64(Rerecorded): "re-recorded", int64(StillKnown): "knows it",
			int64(AlreadyClosed): "was closed", reassertShardClosed: "shard is closed"}},
		{"reassert_run.lua", map[int64]string{runRaised: "raised", runNothing: "nothing to raise", runShardClosed: "closed"}},
		{"survey.lua", map[int64]string{surveyRead: "read", statusFenced: "fenced off"}},
		{"watermark.lua", map[int64]string{watermarkAdvanced: "advanced", watermarkMoved: "not what the caller read",
			watermarkFenced: "fenced off"}},
	} {
		listed := headerStatuses(t, c.script)
		want := c.want
		if c.script != "watermark.lua" {
			want = maps.Clone(c.want)
			maps.Copy(want, noDay)
		}
		for n, words := range want {
			if got, ok := listed[n]; !ok || !strings.Contains(got, words) {
				t.Errorf("%s status %d: the script says %q; the Go side means %q", c.script, n, got, words)
			}
		}
		for n, words := range listed {
			if _, ok := want[n]; !ok {
				t.Errorf("%s lists status %d (%s), which the Go side does not name", c.script, n, words)
			}
		}
	}
}
