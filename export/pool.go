package export

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// PoolConfig parses dsn for an Exporter exporting streams streams at once:
// unless the DSN sets pool_max_conns, the pool may open a connection for
// each stream and one more for a pass's own queries (pgxpool's default, the
// larger of 4 and the CPUs, would make streams wait for one another).
func PoolConfig(dsn string, streams int) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		cfg.MaxConns = max(cfg.MaxConns, int32(max(streams, 1))+1)
	}
	return cfg, nil
}

// NewPool opens a pool for dsn sized by PoolConfig.
func NewPool(ctx context.Context, dsn string, streams int) (*pgxpool.Pool, error) {
	cfg, err := PoolConfig(dsn, streams)
	if err != nil {
		return nil, err
	}
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	return db, nil
}
