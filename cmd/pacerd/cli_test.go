package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/pacer/pacer/config"
)

// TestCommandLine: --help and version exit 0 on stdout/stderr as users
// expect; a wrong flag says how to get help. No daemon is started.
func TestCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string // "" = success
		wantOut string // in stdout+stderr
	}{
		{[]string{"--help"}, "", "-socket"},
		{[]string{"-h"}, "", "-redis"},
		{[]string{"--version"}, "", "pacerd " + version},
		{[]string{"version"}, "", "pacerd " + version},
		{[]string{"--nosuch"}, "run `pacerd --help` for the flags", "flag provided but not defined"},
		{[]string{"extra"}, "run `pacerd --help` for the flags", `unexpected argument "extra"`},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), tc.args, &stdout, &stderr)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("pacerd %q: %v", tc.args, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("pacerd %q: error %v, want %q", tc.args, err, tc.wantErr)
		}
		if out := stdout.String() + stderr.String(); !strings.Contains(out, tc.wantOut) {
			t.Errorf("pacerd %q printed %q, want %q in it", tc.args, out, tc.wantOut)
		}
	}
}

func TestConsoleLogsPlainWhenNotATerminal(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger(config.Log{Format: "console", Level: "info"}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hello")
	if strings.Contains(buf.String(), "\x1b[") || !strings.Contains(buf.String(), "INFO") {
		t.Errorf("console log to a buffer = %q, want INFO without ANSI escapes", buf.String())
	}
}

func TestMissingSocketDirSaysWhatToDo(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"--socket", dir + "/nonexistent/pacer.sock", "--redis", "127.0.0.1:1",
		"--admin", "", "--state-dir", dir, "--holder", "t"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "pass --socket PATH") || !strings.Contains(err.Error(), "`make run`") {
		t.Errorf("missing socket directory: %v", err)
	}
}
