package systemd_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// What the comments of the units and configs point at exists: every
// docs/NAME.md they name, every section they quote after it (docs/X.md,
// "Heading") or of the README (README "Heading"), and every test they name
// (sim/TestName). A comment wrapped over lines is read as one.
func TestCommentsPointAtWhatExists(t *testing.T) {
	docRef := regexp.MustCompile(`(docs/[A-Z]+\.md)(?:, "([^"]+)")?`)
	readmeRef := regexp.MustCompile(`README(?:'s)? "([^"]+)"`)
	testRef := regexp.MustCompile(`\b([a-z]+)/(Test[A-Za-z0-9_]+)`)
	wrap := regexp.MustCompile(`\s*\n\s*#?\s*`)
	refs := 0
	for _, dir := range []string{"../systemd", "../configs"} {
		err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || strings.HasSuffix(path, "_test.go") || strings.HasSuffix(path, ".json") {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			text := wrap.ReplaceAllString(string(data), " ")
			for _, m := range docRef.FindAllStringSubmatch(text, -1) {
				refs++
				if m[2] == "" {
					if _, err := os.Stat(filepath.Join(repoRoot, m[1])); err != nil {
						t.Errorf("%s names %s, which does not exist", path, m[1])
					}
					continue
				}
				if !hasSection(t, filepath.Join(repoRoot, m[1]), m[2]) {
					t.Errorf("%s points at %s, %q: no such section", path, m[1], m[2])
				}
			}
			for _, m := range readmeRef.FindAllStringSubmatch(text, -1) {
				refs++
				if !hasSection(t, filepath.Join(repoRoot, "README.md"), m[1]) {
					t.Errorf("%s points at the README's %q: no such section (the operator's guide is docs/)", path, m[1])
				}
			}
			for _, m := range testRef.FindAllStringSubmatch(text, -1) {
				refs++
				if !definesTest(t, filepath.Join(repoRoot, m[1]), m[2]) {
					t.Errorf("%s names %s/%s: no such test", path, m[1], m[2])
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if refs < 10 {
		t.Fatalf("found %d references; the patterns no longer match how the comments cite the docs", refs)
	}
}

// hasSection reports whether a Markdown page has a heading titled section.
func hasSection(t *testing.T, page, section string) bool {
	t.Helper()
	data, err := os.ReadFile(page)
	if err != nil {
		t.Errorf("%v", err)
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if h := strings.TrimLeft(line, "#"); h != line && strings.EqualFold(strings.TrimSpace(h), section) {
			return true
		}
	}
	return false
}

// definesTest reports whether a _test.go file of dir declares func name.
func definesTest(t *testing.T, dir, name string) bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), "func "+name+"(") {
			return true
		}
	}
	return false
}
