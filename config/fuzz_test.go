package config

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/pacer/pacer/bucket"
)

func FuzzParseCurve(f *testing.F) {
	f.Add([]byte("name: a\nweights: " + weightsYAML(ones(24))))
	f.Add([]byte("name: a\nslots: 48\nweights: " + weightsYAML(ones(48))))
	f.Add([]byte("name: a\nweights: [1e308, 1e308" + strings.Repeat(", 1e308", 22) + "]"))
	f.Add([]byte("name: a\nweights: [5e-324" + strings.Repeat(", 0", 23) + "]"))
	f.Add([]byte("name: &x a\nweights: *x"))
	f.Add([]byte("name: a\nweights: &w [1, *w]"))
	if files, _ := os.ReadDir("../configs/curves"); files != nil {
		for _, e := range files {
			if data, err := os.ReadFile("../configs/curves/" + e.Name()); err == nil {
				f.Add(data)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseCurve(data)
		if err != nil {
			if c != nil {
				t.Fatal("curve and error both returned")
			}
			return
		}
		cum := c.Cumulative()
		switch c.Slots() {
		case 24, 48, 96, 1440:
		default:
			t.Fatalf("accepted %d slots", c.Slots())
		}
		if len(cum) != c.Slots()+1 || cum[0] != 0 || cum[len(cum)-1] != bucket.PPB {
			t.Fatalf("bad cumulative table ends: %d entries, %d..%d", len(cum), cum[0], cum[len(cum)-1])
		}
		for i := 1; i < len(cum); i++ {
			if cum[i] < cum[i-1] {
				t.Fatalf("cumulative decreases at slot %d", i)
			}
		}
		out, err := MarshalCurve(c, "")
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseCurve(out)
		if err != nil {
			t.Fatalf("marshalled curve does not parse: %v\n%s", err, out)
		}
		if !slices.Equal(back.Cumulative(), cum) {
			t.Fatal("marshal round trip changed the curve")
		}
	})
}

func FuzzParseDaemon(f *testing.F) {
	if data, err := os.ReadFile("../configs/pacerd.example.yaml"); err == nil {
		f.Add(data)
	}
	f.Add([]byte(""))
	f.Add([]byte("socket_mode: 0o777\nredis: [/x]\nlease: {window: 9s, grace: 2s}"))
	f.Add([]byte("log: &l {format: json}\nlease: *l"))
	f.Add([]byte("a: &a [*a]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := ParseDaemon(data)
		if err != nil {
			return
		}
		if err := d.Validate(); err != nil {
			t.Fatalf("accepted an invalid config: %v", err)
		}
	})
}
