package transport

import (
	"io"
	"strconv"
)

// ProtocolError is a malformed or oversized request. The server answers it
// with "-ERR Protocol error: ..." and closes the connection, as Redis does,
// because after a framing error the rest of the stream cannot be trusted.
type ProtocolError struct {
	Msg string
}

func (e *ProtocolError) Error() string { return "Protocol error: " + e.Msg }

// requestGuard sits between the socket and redcon's Reader. redcon does the
// parsing; the guard only follows RESP framing (array and bulk headers) for
// two reasons that redcon v1.6.2 cannot handle itself:
//
//   - redcon loops once per announced array element even when the elements
//     have not arrived, so "*99999999999\r\n" costs minutes of CPU per read,
//     and it buffers a request of any announced size. The guard rejects
//     headers and requests above the limits before redcon sees them.
//   - redcon grows its buffer, without compacting, whenever a read ends in
//     the middle of a request, so a client that keeps a pipeline full could
//     grow it without bound. The guard hands bytes on only up to the end of
//     the last complete request it has seen, so redcon's buffer drains after
//     every batch and stays around one request in size.
//
// A request larger than the guard's buffer is handed on in pieces; that is
// rare (the limit is far above any pacer command) and still bounded by
// maxRequest.
type requestGuard struct {
	src io.Reader
	buf []byte
	// buf[r:ready] may be handed to redcon; buf[ready:w] is the start of an
	// incomplete request; buf[scan:w] has not been scanned yet.
	r, ready, scan, w int
	err               error

	maxArgs    int64
	maxRequest int64

	st       guardState
	num      int64 // header value being read
	neg      bool
	digits   int
	args     int64 // bulks still expected in the current array
	bulkLeft int64 // bulk payload bytes still to skip
	reqBytes int64 // bytes of the current request so far
}

type guardState uint8

const (
	gStart    guardState = iota // at a request boundary
	gInline                     // inside an inline (telnet) command line
	gArrayLen                   // after '*'
	gArrayLF                    // after the array header's '\r'
	gDollar                     // expecting '$'
	gBulkLen                    // after '$'
	gBulkLF                     // after the bulk header's '\r'
	gBulkData                   // inside a bulk payload
	gBulkCR                     // expecting the '\r' after a payload
	gBulkEnd                    // expecting the '\n' after a payload
)

const guardBufSize = 16 << 10

func newRequestGuard(src io.Reader, maxArgs, maxRequest int64) *requestGuard {
	return &requestGuard{
		src:        src,
		buf:        make([]byte, guardBufSize),
		maxArgs:    maxArgs,
		maxRequest: maxRequest,
	}
}

func (g *requestGuard) Read(p []byte) (int, error) {
	for g.ready == g.r {
		if g.err != nil {
			return 0, g.err
		}
		switch {
		case g.r == g.w:
			g.r, g.ready, g.scan, g.w = 0, 0, 0, 0
		case g.w == len(g.buf) && g.r > 0:
			n := copy(g.buf, g.buf[g.r:g.w])
			g.ready -= g.r
			g.scan -= g.r
			g.r, g.w = 0, n
		case g.w == len(g.buf):
			// One request fills the whole buffer: pass it on in pieces.
			g.ready = g.w
			continue
		}
		n, err := g.src.Read(g.buf[g.w:])
		g.w += n
		if serr := g.advance(); serr != nil {
			err = serr
		}
		if err != nil {
			// Complete requests before the failure are still answered.
			g.err = err
		}
	}
	n := copy(p, g.buf[g.r:g.ready])
	g.r += n
	return n, nil
}

// advance scans buf[scan:w], moving ready to each request boundary found.
func (g *requestGuard) advance() error {
	for g.scan < g.w {
		if g.st == gBulkData {
			// Skip payload bytes in one step: they are never inspected.
			k := min(g.bulkLeft, int64(g.w-g.scan))
			g.scan += int(k)
			g.reqBytes += k
			g.bulkLeft -= k
			if g.bulkLeft == 0 {
				g.st = gBulkCR
			}
			continue
		}
		c := g.buf[g.scan]
		g.scan++
		g.reqBytes++
		if g.reqBytes > g.maxRequest {
			return g.tooLarge()
		}
		switch g.st {
		case gStart:
			g.reqBytes = 1
			if c == '*' {
				g.st = gArrayLen
				g.resetNum()
			} else if c == '\n' {
				g.ready = g.scan
			} else {
				g.st = gInline
			}
		case gInline:
			if c == '\n' {
				g.endRequest()
			}
		case gArrayLen:
			if c == '\r' {
				g.st = gArrayLF
			} else if !g.digit(c, g.maxArgs) {
				return &ProtocolError{"invalid multibulk length"}
			}
		case gArrayLF:
			if c != '\n' || g.neg || g.num <= 0 {
				return &ProtocolError{"invalid multibulk length"}
			}
			g.args = g.num
			g.st = gDollar
		case gDollar:
			if c != '$' {
				return &ProtocolError{"expected '$', got '" + string(rune(c)) + "'"}
			}
			g.st = gBulkLen
			g.resetNum()
		case gBulkLen:
			if c == '\r' {
				g.st = gBulkLF
			} else if !g.digit(c, g.maxRequest) {
				return &ProtocolError{"invalid bulk length"}
			}
		case gBulkLF:
			if c != '\n' || (g.neg && g.num != 0) {
				return &ProtocolError{"invalid bulk length"}
			}
			// Refuse now rather than after buffering the payload.
			if g.reqBytes+g.num+2 > g.maxRequest {
				return g.tooLarge()
			}
			g.bulkLeft = g.num
			g.st = gBulkData
			if g.bulkLeft == 0 {
				g.st = gBulkCR
			}
		case gBulkCR:
			if c != '\r' {
				return &ProtocolError{"invalid bulk length"}
			}
			g.st = gBulkEnd
		case gBulkEnd:
			if c != '\n' {
				return &ProtocolError{"invalid bulk length"}
			}
			g.args--
			if g.args == 0 {
				g.endRequest()
			} else {
				g.st = gDollar
			}
		}
	}
	return nil
}

func (g *requestGuard) tooLarge() error {
	return &ProtocolError{"request larger than " + strconv.FormatInt(g.maxRequest, 10) + " bytes"}
}

func (g *requestGuard) endRequest() {
	g.st = gStart
	g.ready = g.scan
	g.reqBytes = 0
}

func (g *requestGuard) resetNum() {
	g.num, g.neg, g.digits = 0, false, 0
}

// digit accumulates one header character, accepting what redcon's parseInt
// accepts (an optional leading '-', then decimal digits) but refusing values
// above limit before they can overflow.
func (g *requestGuard) digit(c byte, limit int64) bool {
	if c == '-' && g.digits == 0 && !g.neg {
		g.neg = true
		return true
	}
	if c < '0' || c > '9' {
		return false
	}
	g.digits++
	g.num = g.num*10 + int64(c-'0')
	return g.num <= limit
}
