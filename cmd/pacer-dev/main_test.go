package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
)

func TestHelpExitsZero(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, &out, &errOut); err != nil {
		t.Fatalf("--help: %v", err)
	}
	if !strings.Contains(errOut.String(), "-etcd-port") {
		t.Errorf("--help printed %q", errOut.String())
	}
	err := run(context.Background(), []string{"--nosuch"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "run `pacer-dev --help` for the flags") {
		t.Errorf("--nosuch: %v", err)
	}
	dir := t.TempDir()
	for _, args := range [][]string{{"--admin-port", "0"}, {"--admin-port", "65535", "--hosts", "2"}, {"--nats-port", "70000"}} {
		if err := run(context.Background(), append([]string{"--dir", dir}, args...), &out, &errOut); err == nil || !strings.Contains(err.Error(), "want") {
			t.Errorf("%q: %v", args, err)
		}
	}
}

// TestSecondFleetRefused: the lock is what keeps a second `make run` from
// deleting the first fleet's Redis socket.
func TestSecondFleetRefused(t *testing.T) {
	dir := t.TempDir()
	unlock, err := lockDir(dir, ".run")
	if err != nil {
		t.Fatal(err)
	}
	_, err = lockDir(dir, ".run")
	want := fmt.Sprintf("a pacer dev fleet is already running in .run (pid %d): use it (`. .run/env`), or stop it", os.Getpid())
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("second lock: %v, want %q", err, want)
	}
	// run refuses before starting anything.
	var out, errOut bytes.Buffer
	err = run(context.Background(), []string{"--dir", dir}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("run with the directory locked: %v", err)
	}
	unlock()
	unlock2, err := lockDir(dir, ".run")
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	unlock2()
}

func TestTakenPortNamesTheFlag(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	err = checkPortsFree([]namedPort{{"--etcd-port", 0}, {"--nats-port", port}})
	if want := fmt.Sprintf("port %d is taken", port); err == nil || !strings.Contains(err.Error(), want) ||
		!strings.Contains(err.Error(), "pass --nats-port with a free port") {
		t.Errorf("checkPortsFree: %v", err)
	}
}
