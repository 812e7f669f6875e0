package uring

import (
	"bytes"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

func newTestRing(t *testing.T) *Ring {
	t.Helper()
	r, err := New(8, 32, SetupSubmitAll)
	if err != nil {
		t.Fatalf("io_uring: %v (this package needs a kernel with io_uring enabled)", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func socketPair(t *testing.T) (a, b int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
	return fds[0], fds[1]
}

// wait submits what is queued and returns the next n completions.
func wait(t *testing.T, r *Ring, n uint32) []CQE {
	t.Helper()
	if err := r.Wait(n, 5e9); err != nil {
		t.Fatal(err)
	}
	if got := r.Completions(); got < n {
		t.Fatalf("%d completions, want %d", got, n)
	}
	out := make([]CQE, n)
	for i := range n {
		out[i] = r.CQE(i)
	}
	r.Consume(n)
	return out
}

// A send completes inside the enter that submits it (MSG_DONTWAIT), and a
// recv armed before the bytes arrive completes once they do.
func TestSendRecv(t *testing.T) {
	r := newTestRing(t)
	a, b := socketPair(t)
	buf := make([]byte, 64)
	r.SQE().PrepRecv(b, buf, 1)
	if err := r.Submit(); err != nil {
		t.Fatal(err)
	}
	if n := r.Completions(); n != 0 {
		t.Fatalf("%d completions before anything was sent", n)
	}
	msg := []byte("*1\r\n$4\r\nPING\r\n")
	r.SQE().PrepSend(a, msg, unix.MSG_DONTWAIT, 2)
	got := map[uint64]int32{}
	for _, c := range wait(t, r, 2) {
		got[c.UserData] = c.Res
	}
	if got[2] != int32(len(msg)) || got[1] != int32(len(msg)) || !bytes.Equal(buf[:len(msg)], msg) {
		t.Fatalf("completions %v, buffer %q", got, buf[:len(msg)])
	}
}

// A multishot recv takes a provided buffer per completion and stays armed;
// a recycled buffer is taken again.
func TestMultishotBufRing(t *testing.T) {
	r := newTestRing(t)
	a, b := socketPair(t)
	bufs, err := r.NewBufRing(7, 2, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer bufs.Close()
	r.SQE().PrepRecvMultishot(b, bufs.Group(), 9)
	for i, msg := range []string{"one", "two", "three", "four"} {
		if _, err := unix.Write(a, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		c := wait(t, r, 1)[0]
		id, ok := c.Buffer()
		if c.UserData != 9 || !ok || c.Flags&CQEFMore == 0 || string(bufs.Bytes(id, int(c.Res))) != msg {
			t.Fatalf("message %d: completion %+v", i, c)
		}
		bufs.Recycle(id)
		bufs.Publish()
	}
}

// The servers' wait counts on this: with the rings they use (single
// issuer, deferred task work), a MSG_DONTWAIT send has completed when the
// io_uring_enter that submits it returns, whether it sent its bytes or
// found the socket full (-EAGAIN): its completion is already there.
func TestDontwaitSendCompletesInline(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r, err := New(8, 32, SetupSubmitAll|SetupSingleIssuer|SetupDeferTaskrun)
	if err != nil {
		t.Fatalf("io_uring: %v", err)
	}
	defer r.Close()
	a, _ := socketPair(t)
	msg := []byte(":1\r\n")
	r.SQE().PrepSend(a, msg, unix.MSG_DONTWAIT, 1)
	if err := r.Submit(); err != nil {
		t.Fatal(err)
	}
	if n := r.Completions(); n != 1 || r.CQE(0).Res != int32(len(msg)) {
		t.Fatalf("after the submitting enter: %d completions (%+v), want the send's", n, r.CQE(0))
	}
	r.Consume(1)
	// Fill the socket: the reader never reads.
	unix.SetNonblock(a, true)
	big := make([]byte, 64<<10)
	for {
		if _, err := unix.Write(a, big); err == unix.EAGAIN {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	r.SQE().PrepSend(a, big, unix.MSG_DONTWAIT, 2)
	if err := r.Submit(); err != nil {
		t.Fatal(err)
	}
	if n := r.Completions(); n != 1 || r.CQE(0).Res != -int32(unix.EAGAIN) {
		t.Fatalf("full socket, after the submitting enter: %d completions (%+v), want the send's -EAGAIN", n, r.CQE(0))
	}
}
