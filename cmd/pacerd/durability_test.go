package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/proctest"
	"github.com/pacer/pacer/internal/redisproc"
	"github.com/pacer/pacer/internal/redistest"
)

// runPacerd runs pacerd in-process with extra config against a server, and
// returns its log and its error (nil if it came up and was stopped).
func runPacerd(t *testing.T, srv *redistest.Server, extraConfig string) (string, error) {
	t.Helper()
	return runPacerdAt(t, srv.Socket, extraConfig)
}

// runPacerdAt is runPacerd with the --redis address given.
func runPacerdAt(t *testing.T, redisAddr, extraConfig string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "pacerd.yaml")
	if err := os.WriteFile(cfg, []byte(testConfig+extraConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "p.sock")
	var stdout, stderr proctest.Buffer
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(runCtx, []string{"--config", cfg, "--redis", redisAddr, "--socket", sock, "--holder", "h",
			"--curves", filepath.Join(dir, "none"), "--state-dir", filepath.Join(dir, "state")}, &stdout, &stderr)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-done:
			return stderr.String(), err
		default:
		}
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			cancel()
			err := <-done
			return stderr.String(), err
		}
		if time.Now().After(deadline) {
			t.Fatalf("pacerd neither served nor failed within 10s:\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRefusesRedisThatDoesNotMeetThePolicy(t *testing.T) {
	srv := redistest.StartWith(t, redisproc.Options{Persistent: true, AppendFsync: "everysec"})
	log, err := runPacerd(t, srv, "")
	if err == nil || !strings.Contains(err.Error(), "refusing to start") || !strings.Contains(err.Error(), "runs appendfsync everysec") ||
		!strings.Contains(err.Error(), "CONFIG SET appendfsync always") {
		t.Fatalf("pacerd against appendfsync everysec: %v\n%s", err, log)
	}

	// The same server, fixed: pacerd serves, and says what it verified.
	if err := srv.Client().ConfigSet(ctx, "appendfsync", "always").Err(); err != nil {
		t.Fatal(err)
	}
	if log, err := runPacerd(t, srv, ""); err != nil || !strings.Contains(log, "ledger durability verified") {
		t.Fatalf("pacerd against appendfsync always: %v\n%s", err, log)
	}
}

func TestDurabilityNoneStartsWithAWarning(t *testing.T) {
	srv := redistest.StartWith(t, redisproc.Options{}) // no persistence
	log, err := runPacerd(t, srv, "ledger:\n  durability: none\n")
	if err != nil || !strings.Contains(log, "ledger.durability=none") || !strings.Contains(log, `"level":"warn"`) {
		t.Fatalf("pacerd with durability none: %v\n%s", err, log)
	}
}

func TestManagedRedisNeedsDurabilityAssume(t *testing.T) {
	srv := redistest.StartWith(t, redisproc.Options{Persistent: true, Conf: "rename-command CONFIG \"\"\n"})
	log, err := runPacerd(t, srv, "")
	if err == nil || !strings.Contains(err.Error(), "refuses CONFIG") || !strings.Contains(err.Error(), "ledger.durability_assume: fsync") {
		t.Fatalf("pacerd against a Redis without CONFIG: %v\n%s", err, log)
	}
	log, err = runPacerd(t, srv, "ledger:\n  durability_assume: fsync\n")
	if err != nil || !strings.Contains(log, "assumed to be fsync") {
		t.Fatalf("with durability_assume: fsync: %v\n%s", err, log)
	}
}

// Redis down at start is a degraded mode, not a configuration error: pacerd
// serves (from no leases) and takes leases once a check passes.
func TestStartsWithRedisDownAndGateClosed(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	log, err := runPacerd(t, srv, "")
	if err != nil || !strings.Contains(log, "cannot check the ledger yet; taking no leases until it can be checked") {
		t.Fatalf("pacerd with Redis down: %v\n%s", err, log)
	}
}

func TestReplicasPolicyNeedsTheReplicas(t *testing.T) {
	master := redistest.StartWith(t, redisproc.Options{TCP: true, Extra: []string{"--repl-diskless-sync-delay", "0"}})
	log, err := runPacerd(t, master, "ledger:\n  durability: replicas:1\n")
	if err == nil || !strings.Contains(err.Error(), "has 0 online replica(s); ledger.durability=replicas:1 needs at least 1") {
		t.Fatalf("replicas:1 without a replica: %v\n%s", err, log)
	}
	redistest.StartWith(t, redisproc.Options{ReplicaOf: master.Addr})
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, _ := master.Client().Info(ctx, "replication").Result()
		if strings.Contains(s, "state=online") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica never online:\n%s", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if log, err := runPacerd(t, master, "ledger:\n  durability: replicas:1\n"); err != nil || !strings.Contains(log, "replicas=1") {
		t.Fatalf("replicas:1 with a replica: %v\n%s", err, log)
	}
}
