package lease

import (
	"regexp"
	"strings"
	"testing"
)

// The prelude is created once per master in the library, not once per
// call: a top-level local that a call changes would carry one call's state
// into the next (a stale deferred shard, keys noted as created by another
// call, in another slot). Each lower-case top-level variable is reset by
// begin_call, and no upper-case one (a constant) is ever assigned or
// grown.
func TestPreludeStateIsResetAtEveryCall(t *testing.T) {
	m := regexp.MustCompile(`(?s)\nlocal function begin_call\(\)\n(.*?)\nend\n`).FindStringSubmatch(luaPrelude)
	if m == nil {
		t.Fatal("prelude.lua has no begin_call")
	}
	reset := m[1]
	vars := regexp.MustCompile(`(?m)^local ([A-Za-z_][A-Za-z0-9_]*)\s*=`).FindAllStringSubmatch(luaPrelude, -1)
	if len(vars) < 10 {
		t.Fatalf("found %d top-level variables in prelude.lua; the pattern no longer reads it", len(vars))
	}
	for _, v := range vars {
		name := v[1]
		if strings.ToUpper(name) == name {
			if regexp.MustCompile(`(^|[^A-Za-z0-9_.])` + name + `(\[[^\]]*\])?\s*=[^=]|table\.insert\(` + name + `\b`).
				MatchString(strings.Replace(luaPrelude, v[0], "", 1)) {
				t.Errorf("prelude.lua changes the constant %s; a library's calls would share the change", name)
			}
			continue
		}
		if !regexp.MustCompile(`(?m)^\s*` + name + `\s*=`).MatchString(reset) {
			t.Errorf("prelude.lua's top-level %s is not reset by begin_call: the library's calls would share it", name)
		}
	}
	for _, f := range []string{"local KEYS, ARGV\n", "KEYS, ARGV = keys, args\nbegin_call()\n"} {
		if !strings.Contains(ledgerLibrary.code, f) {
			t.Errorf("the library's code lacks %q", f)
		}
	}
}

// The field that makes a busy shard's done hash a hashtable (prelude.lua's
// DONE_ENC) shares the hash with lease ids: its name must be longer than
// any lease id a grant accepts (200 bytes), so that it is never one, and
// than hash-max-listpack-value's default (64), so that it converts the hash.
func TestDoneEncIsNoLeaseID(t *testing.T) {
	m := regexp.MustCompile(`(?m)^local DONE_ENC = '((?:[^'\\]|\\.)*)'$`).FindStringSubmatch(luaPrelude)
	if m == nil {
		t.Fatal("prelude.lua has no DONE_ENC string literal")
	}
	name := strings.ReplaceAll(m[1], `\'`, `'`)
	if len(name) <= 200 {
		t.Fatalf("DONE_ENC is %d bytes; a lease id may be 200", len(name))
	}
	if err := (GrantRequest{LeaseID: name}).validate(); err == nil || !strings.Contains(err.Error(), "lease id") {
		t.Fatalf("a grant with DONE_ENC as its lease id: %v, want refused for its length", err)
	}
}

// docs/BENCHMARKS.md and CHANGELOG.md quote these constants of the prelude:
// a busy shard's state and done become hashtables at its day's 32nd grant,
// and the history step hashes a call's first five arguments.
func TestDocumentedPreludeConstants(t *testing.T) {
	for name, want := range map[string]string{"BUSY_LEASES": "32", "TIP_ARGS": "5"} {
		m := regexp.MustCompile(`(?m)^local ` + name + ` = (\S+)$`).FindStringSubmatch(luaPrelude)
		if m == nil || m[1] != want {
			t.Errorf("prelude.lua's %s is %v, the docs say %s", name, m, want)
		}
	}
}
