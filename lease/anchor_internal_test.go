package lease

import (
	"regexp"
	"slices"
	"testing"
)

// The anchors' tags are written out in prelude.lua and reanchor.lua: they
// are the tags of slots 0, 256, …, 16,128, the slot tags the index keys use.
func TestAnchorTagsAreTheScriptsTags(t *testing.T) {
	tags := slotTags()
	var want []string
	for g, k := range anchorKeys() {
		tag := tags[g*Slots/anchorGroups]
		if k != anchorIndex+":{"+tag+"}" || Slot(tag) != g*256 {
			t.Fatalf("anchor %d: key %s, tag %s hashes to %d", g, k, tag, Slot(tag))
		}
		want = append(want, tag)
	}
	list := regexp.MustCompile(`(?s)\{('\d+',\s*)+'\d+'\}`)
	num := regexp.MustCompile(`'(\d+)'`)
	for name, code := range map[string]string{"prelude.lua": luaPrelude, "reanchor.lua": luaReanchor} {
		var got []string
		for _, m := range num.FindAllStringSubmatch(list.FindString(code), -1) {
			got = append(got, m[1])
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s's anchor tags:\n%v\nwant\n%v", name, got, want)
		}
	}
}
