package transport

import (
	"strconv"
	"sync/atomic"
)

// DefaultMaxBufferedBytes is the server's buffer budget when
// ServerConfig.MaxBufferedBytes is zero: with the idle connections' own
// few KiB, it keeps pacerd within 64 MiB + 8 KiB per open connection
// whatever its clients send (docs/BENCHMARKS.md, Hostile clients).
const DefaultMaxBufferedBytes = 16 << 20

// bufferBudget is what all of a server's connections together may hold
// beyond an idle connection's buffers: request buffers grown past
// readBufSize to hold one large request, and the copies of commands queued
// by MULTI. A connection takes from it before it grows and gives back when
// it shrinks or closes, so the sum stays at most limit whatever the
// clients do; one that cannot take is refused with an error naming the
// limit, and no other connection is touched. Safe for concurrent use.
type bufferBudget struct {
	limit int64
	used  atomic.Int64
}

// take reserves n bytes; it reports false, reserving nothing, if that
// would pass the limit.
func (b *bufferBudget) take(n int64) bool {
	if b == nil || n <= 0 {
		return true
	}
	if b.used.Add(n) > b.limit {
		b.used.Add(-n)
		return false
	}
	return true
}

// give returns n bytes taken before.
func (b *bufferBudget) give(n int64) {
	if b != nil && n > 0 {
		b.used.Add(-n)
	}
}

// exhausted is the error text of a refusal.
func (b *bufferBudget) exhausted(what string) string {
	return what + ": the server's buffer budget (max_buffered_bytes " + strconv.FormatInt(b.limit, 10) +
		" bytes, shared by all connections) is spent"
}
