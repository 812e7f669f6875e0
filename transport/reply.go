package transport

import "github.com/tidwall/redcon"

// replyBuf collects a connection's replies for one write, in the same
// encoding as redcon.Writer (it calls redcon's Append functions) but into a
// buffer the event loop owns and reuses: answering a SPEND appends a few
// bytes and allocates nothing.
type replyBuf struct {
	b []byte
}

var _ replyWriter = (*replyBuf)(nil)

// reset empties the buffer once written; one grown past
// maxIdleWriteBuffer is dropped, so an idle connection keeps no large one.
func (w *replyBuf) reset() {
	w.b = w.b[:0]
	if cap(w.b) > maxIdleWriteBuffer {
		w.b = nil
	}
}

func (w *replyBuf) WriteString(s string)     { w.b = redcon.AppendString(w.b, s) }
func (w *replyBuf) WriteError(s string)      { w.b = redcon.AppendError(w.b, s) }
func (w *replyBuf) WriteInt64(n int64)       { w.b = redcon.AppendInt(w.b, n) }
func (w *replyBuf) WriteBulk(b []byte)       { w.b = redcon.AppendBulk(w.b, b) }
func (w *replyBuf) WriteBulkString(s string) { w.b = redcon.AppendBulkString(w.b, s) }
func (w *replyBuf) WriteArray(n int)         { w.b = redcon.AppendArray(w.b, n) }
func (w *replyBuf) WriteNull()               { w.b = redcon.AppendNull(w.b) }
func (w *replyBuf) WriteRaw(b []byte)        { w.b = append(w.b, b...) }
