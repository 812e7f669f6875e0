package config

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/pacer/pacer/daemon"
)

// The manual's pages that quote pacerd's defaults. Each is read from the
// repository root.
var docsQuotingDefaults = []string{
	"README.md",
	"docs/CONFIGURATION.md",
	"docs/GUARANTEES.md",
	"docs/PACING.md",
	"docs/OPERATIONS.md",
	"docs/PROTOCOL.md",
	"docs/SECURITY.md",
	"docs/SIMULATION.md",
}

// quotedDefault is how the manual quotes a config key's default in prose:
// "`lease.sparse_wait` (default `5ms`)" or "`lease.window`, default `30s`".
var quotedDefault = regexp.MustCompile("`([a-z_][a-z_.]*)`(?:\\s\\(|,\\s)default\\s`([^`]+)`")

// tableRow is a row of docs/CONFIGURATION.md's key tables:
// "| `key` | `default` | what it sets |".
var tableRow = regexp.MustCompile("(?m)^\\| `([a-z_][a-z_.]*)` \\| `([^`]*)` \\|")

// TestDocsQuoteTheDefaults: every default the manual quotes is the one an
// empty config file gives, and docs/CONFIGURATION.md lists every key.
func TestDocsQuoteTheDefaults(t *testing.T) {
	keys := map[string]bool{}
	for _, k := range allKeys(reflect.TypeFor[Daemon](), "") {
		keys[k] = true
	}
	quotes := 0
	for _, file := range docsQuotingDefaults {
		text := readDoc(t, file)
		for _, m := range quotedDefault.FindAllStringSubmatch(text, -1) {
			quotes++
			checkQuotedDefault(t, file, m[1], m[2], keys)
		}
	}
	if quotes < 10 {
		t.Errorf("found %d defaults quoted as \"`key` (default `value`)\" in %v; the pattern or the pages changed", quotes, docsQuotingDefaults)
	}

	listed := map[string]bool{}
	for _, m := range tableRow.FindAllStringSubmatch(readDoc(t, "docs/CONFIGURATION.md"), -1) {
		if listed[m[1]] {
			t.Errorf("docs/CONFIGURATION.md lists `%s` twice", m[1])
		}
		listed[m[1]] = true
		checkQuotedDefault(t, "docs/CONFIGURATION.md", m[1], m[2], keys)
	}
	for k := range keys {
		if !listed[k] {
			t.Errorf("docs/CONFIGURATION.md does not list the config key `%s`: add a row \"| `%s` | `<default>` | <what it sets> |\" to its tables", k, k)
		}
	}
}

// checkQuotedDefault fails unless value, written in the config file for key,
// gives exactly the configuration of an empty file.
func checkQuotedDefault(t *testing.T, file, key, value string, keys map[string]bool) {
	t.Helper()
	if !keys[key] {
		t.Errorf("%s quotes a default for `%s`, which is not a pacerd config key", file, key)
		return
	}
	got, err := ParseDaemon([]byte(yamlSetting(key, value)))
	if err != nil {
		t.Errorf("%s: `%s` (default `%s`): not a value the config file accepts: %v", file, key, value, err)
		return
	}
	if want := DefaultDaemon(); !reflect.DeepEqual(got, want) {
		t.Errorf("%s says `%s` defaults to `%s`, but the code's default differs (configs/pacerd.example.yaml shows it)", file, key, value)
	}
}

// yamlSetting writes "a.b.c" = value as nested YAML.
func yamlSetting(key, value string) string {
	parts := strings.Split(key, ".")
	var b strings.Builder
	for i, p := range parts {
		b.WriteString(strings.Repeat("  ", i) + p + ":")
		if i < len(parts)-1 {
			b.WriteString("\n")
		}
	}
	b.WriteString(" " + value + "\n")
	return b.String()
}

// TestDocsQuoteTheConstants: constants of the code that the manual quotes in
// prose (the auction-id window, unexported, is checked in daemon/). Every occurrence of each phrase must carry the code's value, and the
// page that explains it must carry it at least once.
func TestDocsQuoteTheConstants(t *testing.T) {
	for _, c := range []struct {
		phrase   *regexp.Regexp // its first group is the quoted value
		want     string
		required string // a page that must quote it
	}{
		{regexp.MustCompile(`flat until ([0-9,]+) SPENDs`), fmt.Sprint(daemon.AutoCurveMinRequests), "docs/CONFIGURATION.md"},
		{regexp.MustCompile(`fewer than ([0-9,]+) SPENDs, the day is flat`), fmt.Sprint(daemon.AutoCurveMinRequests), "docs/SIMULATION.md"},
		{regexp.MustCompile(`recorded\s+over the ([0-9]+) days before`), fmt.Sprint(daemon.AutoCurveDays), "docs/CONFIGURATION.md"},
	} {
		found := false
		for _, file := range docsQuotingDefaults {
			for _, m := range c.phrase.FindAllStringSubmatch(readDoc(t, file), -1) {
				if strings.ReplaceAll(m[1], ",", "") != c.want {
					t.Errorf("%s: %q, but the code says %s", file, m[0], c.want)
				}
				if file == c.required {
					found = true
				}
			}
		}
		if !found {
			t.Errorf("%s no longer says %q (with %s): update this test if the text moved", c.required, c.phrase, c.want)
		}
	}
}

func readDoc(t *testing.T, file string) string {
	t.Helper()
	data, err := os.ReadFile("../" + file)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestRunbookNamesEveryAlert: every alert shipped in configs/alerts/ has its
// entry in docs/OPERATIONS.md's runbook, so an operator paged by it finds
// what to do.
func TestRunbookNamesEveryAlert(t *testing.T) {
	files, err := filepath.Glob("../configs/alerts/*.rules.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no alerting rules in configs/alerts/ (%v)", err)
	}
	runbook := readDoc(t, "docs/OPERATIONS.md")
	alert := regexp.MustCompile(`(?m)^\s*- alert: (\w+)`)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		names := alert.FindAllStringSubmatch(string(data), -1)
		if len(names) == 0 {
			t.Errorf("%s: no alert found", f)
		}
		for _, m := range names {
			if !strings.Contains(runbook, "`"+m[1]+"`") {
				t.Errorf("%s: alert %s is not named in docs/OPERATIONS.md's runbook", f, m[1])
			}
		}
	}
}

// TestDocsLinksResolve: every relative link in the manual names a file that
// exists and, with a #fragment, a heading of that page.
func TestDocsLinksResolve(t *testing.T) {
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "../README.md", "../CHANGELOG.md", "../systemd/README.md")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, page := range pages {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, fragment, _ := strings.Cut(target, "#")
			file := page
			if path != "" {
				file = filepath.Join(filepath.Dir(page), path)
			}
			if _, err := os.Stat(file); err != nil {
				t.Errorf("%s links to %s, which does not exist", page, target)
				continue
			}
			if fragment != "" && strings.HasSuffix(file, ".md") && !hasHeading(t, file, fragment) {
				t.Errorf("%s links to %s: no heading of %s has the anchor #%s", page, target, file, fragment)
			}
		}
	}
}

// hasHeading reports whether a Markdown page has a heading whose GitHub
// anchor is fragment: lower case, punctuation dropped, spaces as hyphens.
func hasHeading(t *testing.T, file, fragment string) bool {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	heading := regexp.MustCompile(`(?m)^#+ (.+)$`)
	for _, m := range heading.FindAllStringSubmatch(string(data), -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(m[1])) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		if b.String() == fragment {
			return true
		}
	}
	return false
}
