package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunArgs(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run(context.Background(), nil, &out, &errb); err == nil || !strings.Contains(err.Error(), "exactly one scenario") {
		t.Fatalf("no args: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("date: 2026-11-21\nhosts: []\n"), 0o644)
	err := run(context.Background(), []string{bad, "--quiet"}, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "hosts: none") {
		t.Fatalf("bad scenario: %v", err)
	}
}
