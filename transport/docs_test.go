package transport

import (
	"os"
	"strings"
	"testing"
)

// docs/SECURITY.md quotes the socket's memory governor as it is.
func TestSecurityDocQuotesTheMemoryBound(t *testing.T) {
	b, err := os.ReadFile("../docs/SECURITY.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(b)), " ")
	if burstConns != 1000 || burstConns/8 != 125 || connMemory != 8<<10 {
		t.Fatalf("burstConns %d, connMemory %d: update docs/SECURITY.md and this test", burstConns, connMemory)
	}
	for _, quote := range []string{
		"While 1,000 or more connections are open",
		"plus 8 KiB per open connection",
		"restored once fewer than 125 are left",
		"64 MiB + 8 KiB per open connection",
	} {
		if !strings.Contains(doc, quote) {
			t.Errorf("docs/SECURITY.md does not say %q", quote)
		}
	}
}
