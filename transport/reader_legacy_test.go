package transport

import (
	"bytes"
	"io"
	"strconv"
)

// legacyReader is the request reader as issue 11 left it (commit b96e65b),
// before arguments aliased the read buffer: each request's arguments were
// copied into one allocation. The differential test below checks that the
// zero-allocation reader parses every input into the same commands and the
// same error.
type legacyReader struct {
	buf []byte
	// buf[r:w] has been read but not parsed into requests.
	r, w int
	// noLF is how many bytes from r are known to hold no '\n' while an
	// inline line is incomplete.
	noLF int
	err  error // a read error held back until buf[r:w] is parsed

	maxArgs    int
	maxRequest int
	maxInline  int
	// bufSize is the buffer of an idle connection: readBufSize, smaller in
	// tests that exercise growth and compaction.
	bufSize int
}

func newLegacyReader(maxArgs, maxRequest, maxInline int) *legacyReader {
	return &legacyReader{maxArgs: maxArgs, maxRequest: maxRequest, maxInline: maxInline, bufSize: readBufSize}
}

// buffered reports whether part of a request has been read.
func (rd *legacyReader) buffered() bool { return rd.w > rd.r }

// fill reads once from src into the buffer, making room first. It returns
// a read error only once every byte read before it has been parsed.
func (rd *legacyReader) fill(src io.Reader) error {
	if rd.err != nil {
		return rd.err
	}
	switch {
	case rd.r == rd.w:
		rd.r, rd.w, rd.noLF = 0, 0, 0
		if cap(rd.buf) != rd.bufSize {
			// Nothing pending: give back a buffer a big request grew.
			rd.buf = make([]byte, rd.bufSize)
		}
	case rd.w == len(rd.buf) && rd.r > 0:
		rd.w = copy(rd.buf, rd.buf[rd.r:rd.w])
		rd.r = 0
	case rd.w == len(rd.buf):
		// One incomplete request fills the buffer. next refuses any
		// request over maxRequest, so one more byte than that suffices.
		size := min(2*len(rd.buf), rd.maxRequest+1)
		if size <= len(rd.buf) {
			size = len(rd.buf) + 1 // unreachable while next enforces maxRequest
		}
		nb := make([]byte, size)
		copy(nb, rd.buf[:rd.w])
		rd.buf = nb
	}
	n, err := src.Read(rd.buf[rd.w:])
	rd.w += n
	if err != nil {
		if n > 0 {
			rd.err = err
			return nil
		}
		return err
	}
	return nil
}

// next returns the next complete request's arguments, or nil and no error
// if the buffer holds no complete request yet. Empty and blank lines are
// skipped, as Redis does.
func (rd *legacyReader) next() ([][]byte, error) {
	for rd.r < rd.w {
		b := rd.buf[rd.r:rd.w]
		var args [][]byte
		var n int
		var err error
		if b[0] == '*' {
			args, n, err = rd.parseArray(b)
		} else {
			args, n, err = rd.parseInline(b)
		}
		if err != nil || n == 0 {
			return nil, err
		}
		rd.r += n
		rd.noLF = 0
		if args != nil {
			return args, nil
		}
	}
	return nil, nil
}

// parseArray parses "*<n>\r\n" and n bulk strings "$<len>\r\n<bytes>\r\n".
// n == 0 means the request is incomplete.
func (rd *legacyReader) parseArray(b []byte) (args [][]byte, n int, err error) {
	count, i, err := header(b, 1, rd.maxArgs, errMultibulk)
	if err != nil {
		return nil, 0, err
	}
	if i == 0 {
		return nil, 0, rd.incomplete(b)
	}
	if count == 0 {
		return nil, 0, errMultibulk
	}
	// marks holds each payload's start and length; a small array on the
	// stack covers every pacer command.
	var small [16]int
	marks := small[:0]
	total := 0
	for range count {
		if i == len(b) {
			return nil, 0, rd.incomplete(b)
		}
		if b[i] != '$' {
			return nil, 0, &ProtocolError{"expected '$', got '" + printable(b[i:i+1]) + "'"}
		}
		size, next, err := header(b, i+1, rd.maxRequest, errBulk)
		if err != nil {
			return nil, 0, err
		}
		if next == 0 {
			return nil, 0, rd.incomplete(b)
		}
		// Refuse now rather than after buffering the payload.
		if next+size+2 > rd.maxRequest {
			return nil, 0, rd.tooLarge()
		}
		end := next + size
		if end+2 > len(b) {
			if end < len(b) && b[end] != '\r' {
				return nil, 0, errBulk
			}
			return nil, 0, nil // within maxRequest, checked above
		}
		if b[end] != '\r' || b[end+1] != '\n' {
			return nil, 0, errBulk
		}
		marks = append(marks, next, size)
		total += size
		i = end + 2
	}
	raw := make([]byte, total)
	args = make([][]byte, count)
	off := 0
	for k := range count {
		start, size := marks[2*k], marks[2*k+1]
		copy(raw[off:], b[start:start+size])
		args[k] = raw[off : off+size : off+size]
		off += size
	}
	return args, i, nil
}

// incomplete reports an error if the incomplete request at b is already too
// large to be allowed to finish.
func (rd *legacyReader) incomplete(b []byte) error {
	if len(b) > rd.maxRequest {
		return rd.tooLarge()
	}
	return nil
}

func (rd *legacyReader) tooLarge() error {
	return &ProtocolError{"request larger than " + strconv.Itoa(rd.maxRequest) + " bytes"}
}

// parseInline parses one line ending in LF (or CRLF). It returns nil args
// and n > 0 for a blank line, n == 0 for an incomplete one.
func (rd *legacyReader) parseInline(b []byte) (args [][]byte, n int, err error) {
	lf := bytes.IndexByte(b[rd.noLF:min(len(b), rd.maxInline+1)], '\n')
	if lf >= 0 {
		lf += rd.noLF
	} else {
		rd.noLF = min(len(b), rd.maxInline+1)
		if len(b) > rd.maxInline {
			return nil, 0, rd.inlineTooLong()
		}
		return nil, 0, nil
	}
	line := b[:lf]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	args, err = splitInline(line, rd.maxArgs)
	if err != nil {
		return nil, 0, err
	}
	return args, lf + 1, nil
}

func (rd *legacyReader) inlineTooLong() error {
	return &ProtocolError{"inline request longer than " + strconv.Itoa(rd.maxInline) +
		" bytes (send long requests as RESP arrays)"}
}
