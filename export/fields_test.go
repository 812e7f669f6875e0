package export

import (
	"encoding/json"
	"maps"
	"testing"
)

// TestFieldsJSON: what appendFieldsJSON writes is JSON that reads back as
// the same fields, for strings as the ledger writes them and for any other
// (quotes, backslashes, control characters, non-ASCII, bytes that are not
// UTF-8: encoding/json's reading of them).
func TestFieldsJSON(t *testing.T) {
	for _, in := range []map[string]string{
		{},
		{"ev": "release", "lease": "h1-b0-7", "amount": "25000", "unused": "1250", "ms": "1763683200000"},
		{"op": `say "hi"`, "path": `C:\x`, "ctl": "a\x00b\nc\t", "del": "\x7f", "utf8": "héllo ✓", "bad": "\xff\xfe"},
		{`k"ey`: "v", "\x01": "w"},
	} {
		got := map[string]string{}
		if err := json.Unmarshal(appendFieldsJSON(nil, in), &got); err != nil {
			t.Fatalf("%q: %v: %s", in, err, appendFieldsJSON(nil, in))
		}
		want := map[string]string{}
		b, _ := json.Marshal(in)
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, want) {
			t.Errorf("%q: read back %q, want %q", in, got, want)
		}
	}
}
