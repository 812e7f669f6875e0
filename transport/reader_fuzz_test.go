package transport

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
)

// The fuzzed reader starts with a 16-byte buffer, so that small inputs
// exercise its growth and compaction.
const fuzzMaxRequest = 256

// readAll parses src read n bytes at a time, returning the commands (each
// its argument count and quoted arguments) up to the first error.
func readAll(src []byte, n int) (cmds []string, err error, maxBuf int) {
	rd := newRequestReader(8, fuzzMaxRequest, 64)
	rd.bufSize = 16
	return readWith(rd, func() int { return cap(rd.buf) }, src, n)
}

// readAllLegacy is readAll with the reader before issue 15.
func readAllLegacy(src []byte, n int) (cmds []string, err error, maxBuf int) {
	rd := newLegacyReader(8, fuzzMaxRequest, 64)
	rd.bufSize = 16
	return readWith(rd, func() int { return cap(rd.buf) }, src, n)
}

type anyReader interface {
	next() ([][]byte, error)
	fill(io.Reader) error
}

func readWith(rd anyReader, bufCap func() int, src []byte, n int) (cmds []string, err error, maxBuf int) {
	r := &chunkReader{b: src, n: n}
	for {
		args, err := rd.next()
		maxBuf = max(maxBuf, bufCap())
		if err != nil {
			return cmds, err, maxBuf
		}
		if args == nil {
			if err := rd.fill(r); err != nil {
				if errors.Is(err, io.EOF) {
					return cmds, nil, maxBuf
				}
				return cmds, err, maxBuf
			}
			continue
		}
		var b strings.Builder
		b.WriteString(strconv.Itoa(len(args)))
		for _, a := range args {
			b.WriteByte(' ')
			b.WriteString(strconv.Quote(string(a)))
		}
		cmds = append(cmds, b.String())
	}
}

// FuzzRequestReader: whatever the bytes, the reader never panics, never
// buffers more than one request of the limit, refuses more arguments than
// the cap, and parses the same commands and error however the bytes are
// split across reads.
func FuzzRequestReader(f *testing.F) {
	for _, s := range readerSeeds() {
		f.Add([]byte(s), uint8(1))
		f.Add([]byte(s), uint8(7))
	}
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		whole, wholeErr, _ := readAll(data, 1<<20)
		split, splitErr, maxBuf := readAll(data, int(chunk)+1)
		if maxBuf > fuzzMaxRequest+1 {
			t.Fatalf("buffer grew to %d bytes for requests of at most %d", maxBuf, fuzzMaxRequest)
		}
		if strings.Join(whole, "\n") != strings.Join(split, "\n") || (wholeErr == nil) != (splitErr == nil) {
			t.Fatalf("whole: %q %v\nsplit by %d: %q %v", whole, wholeErr, int(chunk)+1, split, splitErr)
		}
		if wholeErr != nil && splitErr.Error() != wholeErr.Error() {
			t.Fatalf("errors differ: %v / %v", wholeErr, splitErr)
		}
		for _, c := range whole {
			if n, _ := strconv.Atoi(c[:strings.IndexByte(c+" ", ' ')]); n > 8 || n == 0 {
				t.Fatalf("command with %d arguments: %s", n, c)
			}
		}
	})
}

// FuzzReaderDifferential: the zero-allocation reader, whose arguments alias
// its buffer, parses every input into the same commands, and fails with the
// same error at the same point, as the copying reader it replaced, however
// the bytes are split across reads.
func FuzzReaderDifferential(f *testing.F) {
	for _, s := range readerSeeds() {
		f.Add([]byte(s), uint8(1))
		f.Add([]byte(s), uint8(5))
	}
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		got, gotErr, _ := readAll(data, int(chunk)+1)
		want, wantErr, _ := readAllLegacy(data, int(chunk)+1)
		if strings.Join(got, "\n") != strings.Join(want, "\n") || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Fatalf("input %q split by %d\nnew:    %q %v\nlegacy: %q %v", data, int(chunk)+1, got, gotErr, want, wantErr)
		}
	})
}

func readerSeeds() []string {
	return []string{
		resp("SPEND", "demo", "5"), resp("SPEND", "demo", "5") + resp("SPEND", "c-2", "7", "auction-1") + "PING\r\n",
		"PING\r\n", "PING \"a b\" 'c'\r\n\r\n", "*1\r\n$4\r\nPI", "*9\r\n", "*2\r\n$4\r\nPING\r\n$300\r\n",
		resp("PING", strings.Repeat("y", 200)), strings.Repeat(" ", 100), "\"\r\n", "*1\r\n$-1\r\n",
		resp("PING", strings.Repeat("x", 100)) + "INFO\n", "*2\r\n$0\r\n\r\n$1\r\nx\r\n", "*0\r\n", "*1\r\n$3\r\nabcX\r\n",
	}
}

// roomReader drives a requestReader as the hybrid loop's ring does: a recv into
// room(), completing later, recorded with filled.
type roomReader struct{ *requestReader }

func (r roomReader) fill(src io.Reader) error {
	n, err := src.Read(r.room())
	r.filled(n)
	if n == 0 && err == nil {
		err = io.EOF // a recv of 0 bytes is the end
	}
	if n > 0 {
		return nil // the error comes again with the next recv
	}
	return err
}

// FuzzReaderRoomFilled: the hybrid ring's way of reading (room, then
// filled once the recv completes) parses every input, however split, into
// the same commands and error as fill, with the same bound on the buffer.
func FuzzReaderRoomFilled(f *testing.F) {
	for _, s := range readerSeeds() {
		f.Add([]byte(s), uint8(1))
		f.Add([]byte(s), uint8(6))
	}
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		want, wantErr, _ := readAll(data, int(chunk)+1)
		rd := newRequestReader(8, fuzzMaxRequest, 64)
		rd.bufSize = 16
		got, gotErr, maxBuf := readWith(roomReader{rd}, func() int { return cap(rd.buf) }, data, int(chunk)+1)
		if maxBuf > fuzzMaxRequest+1 {
			t.Fatalf("buffer grew to %d bytes for requests of at most %d", maxBuf, fuzzMaxRequest)
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Fatalf("input %q split by %d\nroom/filled: %q %v\nfill:        %q %v", data, int(chunk)+1, got, gotErr, want, wantErr)
		}
	})
}
