package export

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migration is one file of migrations/, NNNN_name.sql, applied in version order.
type migration struct {
	version int
	name    string
	sql     string
}

func migrations() ([]migration, error) {
	files, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, f := range files {
		base := strings.TrimSuffix(strings.TrimPrefix(f, "migrations/"), ".sql")
		num, name, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("export: migration file %s is not NNNN_name.sql", f)
		}
		body, err := migrationFiles.ReadFile(f)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{v, name, string(body)})
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	for i, m := range out {
		if m.version != i+1 {
			return nil, fmt.Errorf("export: migrations are not numbered 1, 2, 3…: %d is %s", i+1, m.name)
		}
	}
	return out, nil
}

// SchemaVersion is the schema this build writes: its last migration.
func SchemaVersion() int {
	ms, err := migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

// ErrSchemaVersion means the database's schema is not the one this build
// writes: newer (a later pacer-export migrated it), or older and not migrated.
var ErrSchemaVersion = errors.New("export: schema version")

// Migrate applies the migrations the database has not had, each in the one
// transaction that records it in schema_migrations, under an advisory lock so
// that two exporters starting at once apply each migration once. A database
// at a later version than this build knows is refused (ErrSchemaVersion) and
// left alone. It returns the version the database is at.
func Migrate(ctx context.Context, db *pgxpool.Pool) (int, error) {
	return migrate(ctx, db, 0)
}

// migrate is Migrate up to version upTo (0: the last), for tests of a
// database an older build left.
func migrate(ctx context.Context, db *pgxpool.Pool, upTo int) (int, error) {
	ms, err := migrations()
	if err != nil {
		return 0, err
	}
	if upTo > 0 && upTo < len(ms) {
		ms = ms[:upTo]
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("export: migrate: %w", err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('pacer-export migrations'))`); err != nil {
		return 0, fmt.Errorf("export: migrate: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return 0, fmt.Errorf("export: migrate: version table: %w", err)
	}
	var at int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&at); err != nil {
		return 0, fmt.Errorf("export: migrate: %w", err)
	}
	if at > len(ms) {
		return at, fmt.Errorf("%w: the database is at %d, this pacer-export knows up to %d: run a newer pacer-export", ErrSchemaVersion, at, len(ms))
	}
	for _, m := range ms[at:] {
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return at, fmt.Errorf("export: migration %d (%s): %w", m.version, m.name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
			return at, fmt.Errorf("export: migration %d: %w", m.version, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return at, fmt.Errorf("export: migrate: commit: %w", err)
	}
	return len(ms), nil
}

// expectedColumns are the columns the exporter writes and reads, with their
// types (information_schema's data_type), by table.
func expectedColumns() map[string]string {
	cols := map[string]string{}
	add := func(table, typ string, names ...string) {
		for _, n := range names {
			cols[table+"."+n] = typ
		}
	}
	for _, t := range []string{"ledger_events", "spend_days", "spend_hours", "export_cursors", "export_gaps"} {
		add(t, "text", "campaign")
		add(t, "date", "day")
	}
	for _, t := range []string{"ledger_events", "export_cursors", "export_gaps"} {
		add(t, "integer", "shard")
	}
	add("ledger_events", "integer", "stream")
	add("ledger_events", "bigint", "entry_ms", "entry_seq", "micros", "unused", "refunded")
	add("ledger_events", "text", "kind", "ref", "holder")
	add("ledger_events", "timestamp with time zone", "at", "expiry")
	add("ledger_events", "jsonb", "fields")
	add("spend_days", "bigint", strings.Split(totalsColumns, ", ")...)
	add("spend_hours", "bigint", strings.Split(totalsColumns, ", ")...)
	add("spend_hours", "timestamp with time zone", "hour")
	add("export_cursors", "integer", "stream")
	add("export_cursors", "bigint", "last_ms", "last_seq", "events")
	add("export_cursors", "timestamp with time zone", "updated_at")
	add("export_gaps", "text", "kind", "after_id", "until_id")
	add("export_gaps", "bigint", "missing")
	add("export_gaps", "timestamp with time zone", "detected_at")
	return cols
}

// CheckSchema verifies that the database is at this build's schema version
// and that every table has the columns the exporter uses, with the types it
// expects: a table altered by hand is named before anything is written.
func CheckSchema(ctx context.Context, db *pgxpool.Pool) error {
	var at int
	err := db.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&at)
	if err != nil {
		return fmt.Errorf("%w: no schema_migrations table (run pacer-export migrate): %v", ErrSchemaVersion, err)
	}
	if want := SchemaVersion(); at != want {
		return fmt.Errorf("%w: the database is at %d, this build writes %d", ErrSchemaVersion, at, want)
	}
	rows, err := db.Query(ctx, `SELECT table_name || '.' || column_name, data_type FROM information_schema.columns
		WHERE table_schema = current_schema()`)
	if err != nil {
		return fmt.Errorf("export: schema: %w", err)
	}
	have := map[string]string{}
	var col, typ string
	if _, err := pgx.ForEachRow(rows, []any{&col, &typ}, func() error { have[col] = typ; return nil }); err != nil {
		return fmt.Errorf("export: schema: %w", err)
	}
	var bad []string
	for c, want := range expectedColumns() {
		switch got, ok := have[c]; {
		case !ok:
			bad = append(bad, c+" is missing")
		case got != want:
			bad = append(bad, fmt.Sprintf("%s is %s, not %s", c, got, want))
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return fmt.Errorf("%w: the tables differ from migration %d (altered by hand?): %s", ErrSchemaAltered, at, strings.Join(bad, "; "))
	}
	return nil
}

// ErrSchemaAltered means a table lacks a column the exporter uses, or has it
// with another type.
var ErrSchemaAltered = errors.New("export: schema altered")
