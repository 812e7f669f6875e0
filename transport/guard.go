package transport

import (
	"bytes"
	"io"
	"strconv"
	"sync"
	"syscall"
)

// ProtocolError is a malformed or oversized request. The server answers it
// with "-ERR Protocol error: ..." and closes the connection, as Redis does,
// because after a framing error the rest of the stream cannot be trusted.
type ProtocolError struct {
	Msg string
}

func (e *ProtocolError) Error() string { return "Protocol error: " + e.Msg }

// requestReader parses the requests of one connection: RESP arrays of bulk
// strings, as every client library sends, and inline (telnet) lines, as
// redis-cli and humans do. It replaces redcon's Reader, which v1.6.2 made
// unsafe for a socket shared with untrusted local users:
//
//   - its inline parser allocates a copy of the rest of the line at every
//     space, so a 65 KB line of spaces cost ~2 GB of allocation and about a
//     second of CPU (quadratic); here an inline line is parsed in one pass
//     and limited to maxInline bytes;
//   - it loops once per announced array element before the elements
//     arrive, and buffers a request of any announced size; here headers are
//     checked against maxArgs and maxRequest as soon as their digits arrive;
//   - its buffer only ever grows; here it starts at readBufSize, grows only
//     to hold one request of up to maxRequest bytes, and is given back once
//     drained, so an idle connection holds readBufSize bytes.
//
// Each request is parsed from its first byte whenever more bytes arrive.
// That costs at most maxArgs header parses per read for an array (payloads
// are skipped, not scanned), and for an inline line the scan resumes where
// the last one stopped.
//
// The arguments next returns for a RESP array alias the read buffer and a
// slice the reader reuses: parsing a request allocates nothing. They are
// valid until the next call to next or fill, so a command that keeps an
// argument (MULTI's queue, CLIENT SETNAME, an id handed to the Spender)
// copies it. Inline lines, typed by humans, are copied.
type requestReader struct {
	buf []byte
	// args is the argument slice parseArray returns, reused.
	args [][]byte
	// buf[r:w] has been read but not parsed into requests.
	r, w int
	// noLF is how many bytes from r are known to hold no '\n' while an
	// inline line is incomplete.
	noLF int
	err  error // a read error held back until buf[r:w] is parsed
	// refused: the buffer had to grow for a large request and the
	// server's buffer budget had no room; next returns it.
	refused error
	// budget pays for the buffer beyond bufSize (nil: no budget).
	budget *bufferBudget
	// pool lends buffers of readBufSize: a connection waiting for its
	// next request holds none (idle). Nil: each reader has its own.
	pool *sync.Pool
	// fillRaw's state: the read function it hands RawConn.Read, made
	// once (a closure per call would allocate), and its result.
	rawRead func(fd uintptr) bool
	rawN    int
	rawErr  error

	maxArgs    int
	maxRequest int
	maxInline  int
	// bufSize is the buffer of an idle connection: readBufSize, smaller in
	// tests that exercise growth and compaction.
	bufSize int
}

// readBufSize is an idle connection's buffer: a few dozen pipelined SPENDs.
const readBufSize = 4 << 10

func newRequestReader(maxArgs, maxRequest, maxInline int) *requestReader {
	return &requestReader{maxArgs: maxArgs, maxRequest: maxRequest, maxInline: maxInline, bufSize: readBufSize}
}

// newRequestReader returns a reader with the server's limits, whose
// growth the server's buffer budget pays for.
func (s *Server) newRequestReader() *requestReader {
	rd := newRequestReader(int(s.cfg.MaxArgs), int(s.cfg.MaxRequestBytes), int(s.cfg.MaxInlineBytes))
	rd.budget, rd.pool = s.budget, &s.readBufs
	return rd
}

// buffered reports whether part of a request has been read.
func (rd *requestReader) buffered() bool { return rd.w > rd.r }

// fill reads once from src into the buffer, making room first. It returns
// a read error only once every byte read before it has been parsed.
func (rd *requestReader) fill(src io.Reader) error {
	if rd.err != nil {
		return rd.err
	}
	p := rd.room()
	if rd.refused != nil {
		return nil // next reports it
	}
	n, err := src.Read(p)
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

// room makes room in the buffer as fill does and returns the free part,
// for a read that completes later (the hybrid loop's ring): until filled is called the
// buffer must not be touched. If the buffer had to grow and the budget has
// no room, it sets refused and returns nil.
func (rd *requestReader) room() []byte {
	switch {
	case rd.r == rd.w:
		rd.r, rd.w, rd.noLF = 0, 0, 0
		if len(rd.buf) != rd.bufSize {
			// Nothing pending: give back a buffer a big request grew.
			rd.dropBuf()
			rd.newBuf()
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
		if !rd.budget.take(int64(size - len(rd.buf))) {
			rd.refused = &ProtocolError{rd.budget.exhausted("request larger than " + strconv.Itoa(len(rd.buf)) + " bytes refused")}
			return nil
		}
		nb := make([]byte, size)
		copy(nb, rd.buf[:rd.w])
		rd.buf = nb
	}
	return rd.buf[rd.w:]
}

// filled records n bytes read into what room returned.
func (rd *requestReader) filled(n int) { rd.w += n }

// release gives the buffer and its share of the budget back; the
// connection is closing.
func (rd *requestReader) release() {
	rd.dropBuf()
	rd.r, rd.w = 0, 0
}

// idle gives the buffer back if it holds nothing: the connection waits for
// its next request, and the next read takes a buffer from the pool again.
// The arguments next returned are then invalid.
func (rd *requestReader) idle() {
	if rd.r == rd.w && rd.buf != nil {
		rd.r, rd.w, rd.noLF = 0, 0, 0
		rd.dropBuf()
	}
}

// dropBuf lets go of the buffer: a grown one gives its share of the budget
// back, a pooled one goes back to the pool. It drops the last arguments,
// which point into it.
func (rd *requestReader) dropBuf() {
	switch {
	case len(rd.buf) > rd.bufSize:
		rd.budget.give(int64(len(rd.buf) - rd.bufSize))
	case rd.pool != nil && len(rd.buf) == readBufSize:
		rd.pool.Put((*[readBufSize]byte)(rd.buf))
	}
	rd.buf = nil
	clear(rd.args[:cap(rd.args)])
}

func (rd *requestReader) newBuf() {
	if rd.pool != nil && rd.bufSize == readBufSize {
		rd.buf = rd.pool.Get().(*[readBufSize]byte)[:]
		return
	}
	rd.buf = make([]byte, rd.bufSize)
}

// fillRaw is fill for a connection of the goroutine server: it waits for
// the socket to be readable (under its read deadline) holding no buffer
// while nothing is pending, so an idle connection costs its goroutine and
// not a buffer too.
func (rd *requestReader) fillRaw(raw syscall.RawConn) error {
	if rd.err != nil {
		return rd.err
	}
	if rd.rawRead == nil {
		rd.rawRead = rd.readRaw
	}
	rd.rawN, rd.rawErr = 0, nil
	err := raw.Read(rd.rawRead)
	switch {
	case err != nil:
		return err // the deadline, or a close
	case rd.refused != nil:
		return nil
	case rd.rawErr != nil:
		return rd.rawErr
	case rd.rawN == 0:
		return io.EOF
	}
	rd.w += rd.rawN
	return nil
}

// readRaw is fillRaw's read: false (wait until readable) on EAGAIN, having
// given the buffer back if it holds nothing.
func (rd *requestReader) readRaw(fd uintptr) bool {
	p := rd.room()
	if rd.refused != nil {
		return true // next reports it
	}
	for {
		rd.rawN, rd.rawErr = syscall.Read(int(fd), p)
		if rd.rawErr != syscall.EINTR {
			break
		}
	}
	if rd.rawErr == syscall.EAGAIN {
		rd.idle()
		return false
	}
	return true
}

// next returns the next complete request's arguments, or nil and no error
// if the buffer holds no complete request yet. Empty and blank lines are
// skipped, as Redis does.
func (rd *requestReader) next() ([][]byte, error) {
	if rd.refused != nil {
		return nil, rd.refused
	}
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

var (
	errMultibulk = &ProtocolError{"invalid multibulk length"}
	errBulk      = &ProtocolError{"invalid bulk length"}
)

// maxHeaderDigits bounds a header's digits, leading zeros included.
const maxHeaderDigits = 20

// header parses the decimal number and CRLF of a RESP header starting at
// b[i] (after its '*' or '$'). It returns the number and the index after the
// LF; next == 0 means the header is incomplete but valid so far.
func header(b []byte, i, limit int, bad error) (v, next int, err error) {
	start := i
	for ; i < len(b); i++ {
		c := b[i]
		if c == '\r' {
			if i == start {
				return 0, 0, bad
			}
			if i+1 == len(b) {
				return 0, 0, nil
			}
			if b[i+1] != '\n' {
				return 0, 0, bad
			}
			return v, i + 2, nil
		}
		if c < '0' || c > '9' || i-start >= maxHeaderDigits {
			return 0, 0, bad
		}
		v = v*10 + int(c-'0')
		if v > limit {
			return 0, 0, bad
		}
	}
	return 0, 0, nil
}

// parseArray parses "*<n>\r\n" and n bulk strings "$<len>\r\n<bytes>\r\n".
// n == 0 means the request is incomplete.
func (rd *requestReader) parseArray(b []byte) (args [][]byte, n int, err error) {
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
		i = end + 2
	}
	args = rd.args[:0]
	for k := range count {
		start, size := marks[2*k], marks[2*k+1]
		args = append(args, b[start:start+size:start+size])
	}
	rd.args = args
	return args, i, nil
}

// incomplete reports an error if the incomplete request at b is already too
// large to be allowed to finish.
func (rd *requestReader) incomplete(b []byte) error {
	if len(b) > rd.maxRequest {
		return rd.tooLarge()
	}
	return nil
}

func (rd *requestReader) tooLarge() error {
	return &ProtocolError{"request larger than " + strconv.Itoa(rd.maxRequest) + " bytes"}
}

// parseInline parses one line ending in LF (or CRLF). It returns nil args
// and n > 0 for a blank line, n == 0 for an incomplete one.
func (rd *requestReader) parseInline(b []byte) (args [][]byte, n int, err error) {
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

func (rd *requestReader) inlineTooLong() error {
	return &ProtocolError{"inline request longer than " + strconv.Itoa(rd.maxInline) +
		" bytes (send long requests as RESP arrays)"}
}

var errQuotes = &ProtocolError{"unbalanced quotes in request"}

// splitInline splits an inline command line into arguments in one pass, as
// redis-cli would quote them: words separated by spaces or tabs; a word
// starting with a double quote may contain spaces and the escapes \n \r \t
// \" \\ and \xHH; one starting with a single quote may contain spaces and
// \'. A closing quote must end the word. A blank line has no arguments.
func splitInline(line []byte, maxArgs int) ([][]byte, error) {
	var raw []byte // all arguments' bytes; allocated at the first word
	var spans [2 * 16]int
	marks := spans[:0]
	for i := 0; i < len(line); {
		c := line[i]
		if c == ' ' || c == '\t' {
			i++
			continue
		}
		if len(marks)/2 == maxArgs {
			return nil, &ProtocolError{"inline request with more than " + strconv.Itoa(maxArgs) + " arguments"}
		}
		if raw == nil {
			raw = make([]byte, 0, len(line)-i)
		}
		start := len(raw)
		switch c {
		case '"', '\'':
			i++
			closed := false
			for i < len(line) {
				ch := line[i]
				i++
				if ch == c {
					closed = true
					break
				}
				if ch == '\\' && i < len(line) {
					esc := line[i]
					i++
					if c == '\'' {
						if esc != '\'' {
							raw = append(raw, '\\')
						}
						raw = append(raw, esc)
						continue
					}
					switch esc {
					case 'n':
						esc = '\n'
					case 'r':
						esc = '\r'
					case 't':
						esc = '\t'
					case 'x':
						if i+1 < len(line) && isHex(line[i]) && isHex(line[i+1]) {
							esc = unhex(line[i])<<4 | unhex(line[i+1])
							i += 2
						}
					}
					raw = append(raw, esc)
					continue
				}
				raw = append(raw, ch)
			}
			if !closed || (i < len(line) && line[i] != ' ' && line[i] != '\t') {
				return nil, errQuotes
			}
		default:
			for i < len(line) && line[i] != ' ' && line[i] != '\t' {
				raw = append(raw, line[i])
				i++
			}
		}
		marks = append(marks, start, len(raw))
	}
	if len(marks) == 0 {
		return nil, nil
	}
	args := make([][]byte, len(marks)/2)
	for k := range args {
		args[k] = raw[marks[2*k]:marks[2*k+1]:marks[2*k+1]]
	}
	return args, nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}
