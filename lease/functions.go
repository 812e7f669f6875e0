package lease

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The ledger's scripts that share the prelude run as the functions of one
// Redis Functions library (FUNCTION LOAD, FCALL; Redis 7.0 or later). A
// library is loaded once per master, so its prelude (the helpers every
// script uses) is created once, not again at every call as a script's
// would be (that re-run was ~20 µs of a lease call's Redis CPU).
//
// The library's name and its functions' names carry a hash of its code:
// daemons of two releases, each with its own scripts, call their own
// library on the same master during a rolling upgrade, and a library is
// never replaced under a caller. Old libraries stay until an operator
// deletes them (FUNCTION DELETE); the code is ~70 KB.
//
// A master may not have the library: it restarted without persistence, it
// was restored from a backup taken before, it is a replica promoted before
// the library reached it, or a new Cluster master. As EVALSHA's NOSCRIPT
// is answered by EVAL, a call answered "Function not found" loads the
// library on the master that answered and is sent again (see Run).

// library is a Redis Functions library built from the prelude and the
// scripts' bodies. It is immutable.
type library struct {
	name string
	code string
}

// function is one of a library's functions: a ledger script called by
// FCALL. It is immutable and safe for concurrent use.
type function struct {
	lib  *library
	name string
}

// newLibrary builds the library of bodies (script name -> Lua body, each
// run with the prelude in front). A body sees KEYS and ARGV as a script
// does: the prelude's helpers read them too, so they are the library's
// upvalues, set at each call (Redis runs one function at a time). Every
// function may touch keys of other slots than its KEYS' on its own master
// (allow-cross-slot-keys): on a Cluster, a new index entry's slot is
// recorded in an anchor key (see index.go); any other key a script
// touches is one of its KEYS.
func newLibrary(prelude string, bodies [][2]string) *library {
	const named = "@LIBRARY@"
	var b strings.Builder
	b.WriteString("local KEYS, ARGV\n")
	b.WriteString(prelude)
	for _, nb := range bodies {
		b.WriteString("\nredis.register_function{function_name = '" + named + "_" + nb[0] + "', flags = {'allow-cross-slot-keys'}, callback = function(keys, args)\nKEYS, ARGV = keys, args\nbegin_call()\n")
		b.WriteString(nb[1])
		b.WriteString("\nend}\n")
	}
	sum := sha1.Sum([]byte(b.String()))
	name := "pacer_" + hex.EncodeToString(sum[:6])
	return &library{name: name, code: "#!lua name=" + name + "\n" + strings.ReplaceAll(b.String(), named, name)}
}

// function returns the library's function for the body named name.
func (lib *library) function(name string) *function {
	if !strings.Contains(lib.code, "redis.register_function{function_name = '"+lib.name+"_"+name+"',") {
		panic("lease: no ledger script named " + name)
	}
	return &function{lib: lib, name: lib.name + "_" + name}
}

// Run calls f on the master of keys[0] (FCALL), and, if that master lacks
// the library, loads it there and calls again.
//
// On a Cluster the client's slot map may lag the Cluster (go-redis reloads
// it in the background after a redirection): the load may reach a master
// before a failover, now a replica that answers READONLY, or the master
// that gave slots to a new one, which has the library, so that the call
// sent again is still answered "Function not found". Either way the map is
// reloaded and the load and call tried again, up to loadTries times,
// loadWait apart.
func (f *function) Run(ctx context.Context, rdb redis.UniversalClient, keys []string, args ...any) *redis.Cmd {
	cmd := f.send(ctx, rdb, keys, args...)
	cc, isCluster := rdb.(*redis.ClusterClient)
	for try := 1; f.missing(cmd.Err()); try++ {
		err := f.lib.load(ctx, rdb, keys)
		if err == nil {
			cmd = f.send(ctx, rdb, keys, args...)
			if !f.missing(cmd.Err()) {
				break
			}
		} else if !strings.Contains(err.Error(), "READONLY") {
			cmd.SetErr(err)
			return cmd
		}
		if !isCluster || try == loadTries {
			if err != nil {
				cmd.SetErr(err)
			}
			return f.explain(cmd)
		}
		cc.ReloadState(ctx)
		select {
		case <-ctx.Done():
			cmd.SetErr(fmt.Errorf("%w (waiting for the Cluster's slot map: %w)", cmd.Err(), ctx.Err()))
			return cmd
		case <-time.After(loadWait):
		}
	}
	return f.explain(cmd)
}

func (f *function) send(ctx context.Context, c redis.Cmdable, keys []string, args ...any) *redis.Cmd {
	return c.FCall(ctx, f.name, keys, args...)
}

// resend queues the library's load and the call again, for a pipeline on
// one connection (Durability.Run's WAIT must follow the call there).
func (f *function) resend(ctx context.Context, p redis.Pipeliner, asking bool, keys []string, args ...any) *redis.Cmd {
	p.FunctionLoad(ctx, f.lib.code) // "already exists" when another caller loaded it first
	queueAsking(ctx, p, asking)
	return f.explain(f.send(ctx, p, keys, args...))
}

// missing reports whether err says the server does not have the library.
func (f *function) missing(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Function not found")
}

// explain says what a server without Functions lacks, in place of its
// "unknown command".
func (f *function) explain(cmd *redis.Cmd) *redis.Cmd {
	if err := cmd.Err(); err != nil && strings.Contains(strings.ToLower(err.Error()), "unknown command") {
		cmd.SetErr(fmt.Errorf("ledger script %s: the ledger needs Redis 7.0 or later (FCALL): %w", f.name, err))
	}
	return cmd
}

// load loads the library on the master that serves keys[0] by the
// client's slot map (any master for a client of one master). A library
// already there is no error.
func (lib *library) load(ctx context.Context, rdb redis.UniversalClient, keys []string) error {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok || len(keys) == 0 {
		return lib.loadOn(ctx, rdb)
	}
	m, err := cc.MasterForKey(ctx, keys[0])
	if err != nil {
		return fmt.Errorf("load %s: master for %s: %w", lib.name, keys[0], err)
	}
	return lib.loadOn(ctx, m)
}

// Run re-reads a Cluster's slot map up to loadTries times, loadWait apart,
// while the library's load answers READONLY or the call after it is still
// answered "Function not found".
const (
	loadTries = 20
	loadWait  = 100 * time.Millisecond
)

// loadOn loads the library on node.
func (lib *library) loadOn(ctx context.Context, node redis.Cmdable) error {
	err := node.FunctionLoad(ctx, lib.code).Err()
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		return fmt.Errorf("FUNCTION LOAD %s: %w", lib.name, err)
	}
	return nil
}
