package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pacer/pacer/export"
	"github.com/pacer/pacer/internal/pgproc"
	"github.com/pacer/pacer/lease"
)

// billing is the fleet's PostgreSQL and the pacer-export copying the
// ledger into it.
type billing struct {
	dsn      string
	dir      string // the cluster's directory: socket, data, log
	exporter *proc
}

// startBilling starts PostgreSQL and pacer-export. The fleet runs without
// them when PostgreSQL cannot start (not installed, or it fails): it says
// why and how to get it, and goes on.
func (f *fleet) startBilling(ctx context.Context, stdout io.Writer) {
	b, err := f.billingUp(ctx)
	if err != nil {
		fmt.Fprintf(stdout, "PostgreSQL and pacer-export not started, the fleet runs without them: %v\n", err)
		return
	}
	f.billing = b
}

func (f *fleet) billingUp(ctx context.Context) (*billing, error) {
	c := f.cfg
	exporterBin := filepath.Join(c.bin, "pacer-export")
	if _, err := os.Stat(exporterBin); err != nil {
		return nil, fmt.Errorf("%w (run `make build`)", err)
	}
	// A fresh cluster each run, in a temporary directory (under root the
	// server runs as nobody, who must reach it).
	pg, err := pgproc.Start(ctx)
	if err != nil {
		return nil, err
	}
	f.onStop(pg.Stop)
	dsn, err := pg.CreateNamedDB(ctx, "pacer")
	if err != nil {
		return nil, err
	}
	if err := f.prepareExport(ctx, dsn); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(c.abs, "pacer-export.log"))
	if err != nil {
		return nil, err
	}
	f.onStop(func() { logf.Close() })
	cmd := exec.Command(exporterBin, "--redis", f.redis, "--sql", dsn, "--consumer", "dev",
		"--metrics", fmt.Sprintf("127.0.0.1:%d", c.exportPort()), "run")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	p, err := start(cmd)
	if err != nil {
		return nil, fmt.Errorf("start pacer-export: %w", err)
	}
	f.onStop(p.stop)
	return &billing{dsn: dsn, dir: pg.Dir, exporter: p}, nil
}

// prepareExport creates the schema in the new database and, since it holds
// nothing yet, retires the consumer group a previous run's exporter left in
// the ledger: the new exporter copies every stream from its first entry.
func (f *fleet) prepareExport(ctx context.Context, dsn string) error {
	db, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := export.Migrate(ctx, db); err != nil {
		return err
	}
	l := lease.New(f.rdb, lease.Config{}, nil)
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := export.New(f.rdb, l, db, export.Config{}, nil, nil).DropGroup(dctx); err != nil {
		return fmt.Errorf("retire the previous run's export group: %w", err)
	}
	return nil
}
