// Package pgtest gives tests and benchmarks a real PostgreSQL server
// (internal/pgproc): one shared by a test binary, each test in a database of
// its own, or one a test owns (to crash and restart it).
package pgtest

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pacer/pacer/internal/pgproc"
)

// Server is one PostgreSQL cluster (pgproc.Server).
type Server = pgproc.Server

// DefaultBin is where Debian's postgresql-15 keeps its server programs.
const DefaultBin = pgproc.DefaultBin

// Start runs initdb and starts a server (pgproc.Start).
func Start(ctx context.Context) (*Server, error) { return pgproc.Start(ctx) }

// Shared is a server started once for a test binary (TestMain) and shared
// by its tests, each in its own database.
type Shared struct {
	srv *Server
	err error
}

// Main starts a shared server, runs the tests, stops it and returns the exit
// code: call it from TestMain as os.Exit(pgtest.Main(m, &shared)).
func Main(m *testing.M, sh *Shared) int {
	sh.srv, sh.err = Start(context.Background())
	code := m.Run()
	if sh.srv != nil {
		sh.srv.Stop()
	}
	return code
}

// DB returns a fresh database on the shared server, or fails the test with
// the reason the server could not start.
func (sh *Shared) DB(tb testing.TB) string {
	tb.Helper()
	if sh.err != nil {
		tb.Fatal(sh.err)
	}
	if sh.srv == nil {
		tb.Fatal(errors.New("pgtest: the shared server was not started: call pgtest.Main from TestMain"))
	}
	dsn, err := sh.srv.CreateDB(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return dsn
}

// Own starts a server for one test (one it may crash and restart), stopped
// at cleanup.
func Own(tb testing.TB) *Server {
	tb.Helper()
	s, err := Start(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// OwnDurable is Own with fsync on (pgproc.StartDurable), as production
// runs PostgreSQL: for benchmarks.
func OwnDurable(tb testing.TB) *Server {
	tb.Helper()
	s, err := pgproc.StartDurable(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// Pool creates a fresh database on s and returns its DSN and a pool on it,
// closed at cleanup.
func Pool(tb testing.TB, s *Server) (string, *pgxpool.Pool) {
	tb.Helper()
	dsn, err := s.CreateDB(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	db, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(db.Close)
	return dsn, db
}
