package export

import (
	"encoding/binary"
	"time"
)

// copyColumns are the ledger_events columns a batch's COPY writes, in the
// order copyRows encodes them (exported_at takes its default).
const copyColumns = "stream, entry_ms, entry_seq, campaign, day, shard, kind, micros, unused, refunded, ref, holder, at, expiry, fields"

// pgEpoch is the origin of PostgreSQL's binary date and timestamptz: days
// and microseconds since 2000-01-01 UTC. The times encoded are within
// maxEntryMS (parseEntry), so their microseconds never overflow.
var (
	pgEpoch       = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	pgEpochMicros = pgEpoch.UnixMicro()
)

// copyRows encodes evs, rows of stream id of the campaign-day k (day as
// days since pgEpoch) and shard, in COPY's binary format (PostgreSQL's
// "COPY … FROM STDIN (FORMAT binary)": a header, then per row the number of
// fields and each field as its length and its binary send form, -1 for
// NULL; then -1). It writes straight into one buffer, so encoding a row
// costs no allocation beyond its fields' JSON, if any.
func copyRows(dst []byte, stream int32, campaign string, day int32, shard int32, evs []event) []byte {
	dst = append(dst, "PGCOPY\n\xff\r\n\x00"...)
	dst = binary.BigEndian.AppendUint32(dst, 0) // flags
	dst = binary.BigEndian.AppendUint32(dst, 0) // header extension
	for i := range evs {
		e := &evs[i]
		dst = binary.BigEndian.AppendUint16(dst, 15)
		dst = appendInt4(dst, stream)
		dst = appendInt8(dst, e.id.ms)
		dst = appendInt8(dst, e.id.seq)
		dst = appendText(dst, campaign)
		dst = appendInt4(dst, day)
		dst = appendInt4(dst, shard)
		dst = appendText(dst, e.kind)
		dst = appendInt8(dst, e.micros)
		dst = appendInt8(dst, e.unused)
		dst = appendInt8(dst, e.refunded)
		dst = appendText(dst, e.ref)
		dst = appendText(dst, e.holder)
		dst = appendInt8(dst, e.at.UnixMicro()-pgEpochMicros)
		if e.expiry.IsZero() {
			dst = appendNull(dst)
		} else {
			dst = appendInt8(dst, e.expiry.UnixMicro()-pgEpochMicros)
		}
		if e.extra == nil {
			dst = appendNull(dst)
		} else {
			// jsonb's binary form: version 1, then the JSON text.
			at := len(dst)
			dst = append(dst, 0, 0, 0, 0, 1)
			dst = appendFieldsJSON(dst, e.extra)
			binary.BigEndian.PutUint32(dst[at:], uint32(len(dst)-at-4))
		}
	}
	return binary.BigEndian.AppendUint16(dst, 0xffff)
}

func appendInt4(dst []byte, v int32) []byte {
	dst = binary.BigEndian.AppendUint32(dst, 4)
	return binary.BigEndian.AppendUint32(dst, uint32(v))
}

func appendInt8(dst []byte, v int64) []byte {
	dst = binary.BigEndian.AppendUint32(dst, 8)
	return binary.BigEndian.AppendUint64(dst, uint64(v))
}

func appendText(dst []byte, s string) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(s)))
	return append(dst, s...)
}

func appendNull(dst []byte) []byte { return binary.BigEndian.AppendUint32(dst, 0xffffffff) }
