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
