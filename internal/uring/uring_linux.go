// Package uring is the small part of Linux's io_uring that pacer's socket
// servers use, on golang.org/x/sys/unix raw syscalls and mmap: a ring (its
// submission and completion queues), submission entries for recv, send,
// read, poll and cancel, and a ring of provided buffers.
//
// The model: the process and the kernel share two queues in mmapped memory.
// The process writes submission entries (SQEs) and publishes them by
// moving the submission tail; one io_uring_enter both hands the kernel
// every SQE published since the last one and, in the same call, waits for
// completions (CQEs), which the kernel appends to the completion queue and
// the process consumes by moving the completion head. Each side writes its
// own index and reads the other's, so those indices are read and written
// with atomic loads and stores (acquire and release, which Go's atomics
// give); the entries themselves are plain memory ordered by them.
//
// A Ring is not safe for concurrent use: one goroutine, locked to its OS
// thread when the ring is created with SetupSingleIssuer, owns it.
package uring

import (
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Setup flags (io_uring_setup(2)).
const (
	SetupCQSize       = 1 << 3
	SetupSubmitAll    = 1 << 7
	SetupCoopTaskrun  = 1 << 8
	SetupSingleIssuer = 1 << 12
	// SetupDeferTaskrun: completions are only processed when the ring's
	// owner enters the kernel to wait for them, never by interrupting
	// its thread. Needs SetupSingleIssuer.
	SetupDeferTaskrun = 1 << 13
)

// Feature bits reported by setup.
const (
	FeatSingleMmap = 1 << 0
	FeatNoDrop     = 1 << 1
	FeatExtArg     = 1 << 8
)

// Opcodes.
const (
	OpNop         = 0
	OpPollAdd     = 6
	OpAsyncCancel = 14
	OpRead        = 22
	OpSend        = 26
	OpRecv        = 27
)

// SQE flags.
const (
	SQEBufferSelect   = 1 << 5
	SQECQESkipSuccess = 1 << 6
)

// Flags of a recv or send SQE's ioprio field.
const (
	RecvSendPollFirst = 1 << 0
	RecvMultishot     = 1 << 1
)

// CQE flags.
const (
	CQEFBuffer       = 1 << 0
	CQEFMore         = 1 << 1
	CQEFSockNonempty = 1 << 2
	cqeBufferShift   = 16
)

const (
	enterGetEvents = 1 << 0
	enterExtArg    = 1 << 3

	offSQRing = 0
	offCQRing = 0x8000000
	offSQEs   = 0x10000000

	registerPbufRing   = 22
	unregisterPbufRing = 23
)

// SQE is a submission queue entry (struct io_uring_sqe, 64 bytes).
type SQE struct {
	Opcode      uint8
	Flags       uint8
	Ioprio      uint16
	Fd          int32
	Off         uint64
	Addr        uint64
	Len         uint32
	OpFlags     uint32 // msg_flags, poll32_events, cancel_flags...
	UserData    uint64
	BufGroup    uint16
	Personality uint16
	SpliceFdIn  int32
	Addr3       uint64
	_           uint64
}

// CQE is a completion queue entry (struct io_uring_cqe, 16 bytes).
type CQE struct {
	UserData uint64
	Res      int32
	Flags    uint32
}

// Buffer is the provided buffer's id of a completion with CQEFBuffer.
func (c *CQE) Buffer() (id uint16, ok bool) {
	return uint16(c.Flags >> cqeBufferShift), c.Flags&CQEFBuffer != 0
}

type sqringOffsets struct {
	Head, Tail, RingMask, RingEntries, Flags, Dropped, Array, Resv1 uint32
	UserAddr                                                        uint64
}

type cqringOffsets struct {
	Head, Tail, RingMask, RingEntries, Overflow, CQEs, Flags, Resv1 uint32
	UserAddr                                                        uint64
}

type params struct {
	SQEntries, CQEntries, Flags, SQThreadCPU, SQThreadIdle, Features, WQFd uint32
	Resv                                                                   [3]uint32
	SQOff                                                                  sqringOffsets
	CQOff                                                                  cqringOffsets
}

type getEventsArg struct {
	Sigmask     uint64
	SigmaskSize uint32
	MinWaitUsec uint32
	Ts          uint64
}

// Ring is one io_uring instance. The zero value is not usable: see New.
type Ring struct {
	fd       int
	Features uint32

	ringMem []byte // the SQ and CQ rings (one mapping: FeatSingleMmap)
	sqeMem  []byte

	sqHead, sqTail *uint32
	sqMask         uint32
	sqes           []SQE
	sqLocal        uint32 // our tail: SQEs written, not yet published
	sqPending      uint32 // published, not yet submitted by an enter

	cqHead, cqTail *uint32
	cqMask         uint32
	cqes           []CQE
}

// ErrUnsupported wraps the reasons io_uring cannot be used here: a kernel
// without it (ENOSYS), one where it is disabled or forbidden (EPERM, e.g.
// /proc/sys/kernel/io_uring_disabled or a seccomp filter), or one without
// a feature this package needs.
var ErrUnsupported = errors.New("io_uring unavailable")

// New sets up a ring with at least entries SQEs and cqEntries CQEs (0: the
// kernel's default, twice entries). flags are Setup* bits.
func New(entries, cqEntries, flags uint32) (*Ring, error) {
	var p params
	p.Flags = flags
	if cqEntries > 0 {
		p.Flags |= SetupCQSize
		p.CQEntries = cqEntries
	}
	fd, _, errno := unix.RawSyscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		if errno == unix.ENOSYS || errno == unix.EPERM || errno == unix.EACCES {
			return nil, fmt.Errorf("%w: io_uring_setup: %v", ErrUnsupported, errno)
		}
		return nil, fmt.Errorf("io_uring_setup: %w", errno)
	}
	r := &Ring{fd: int(fd), Features: p.Features}
	if p.Features&FeatSingleMmap == 0 || p.Features&FeatNoDrop == 0 || p.Features&FeatExtArg == 0 {
		r.Close()
		return nil, fmt.Errorf("%w: kernel lacks single mmap, nodrop or ext_arg (features %#x)", ErrUnsupported, p.Features)
	}
	size := max(p.SQOff.Array+p.SQEntries*4, p.CQOff.CQEs+p.CQEntries*uint32(unsafe.Sizeof(CQE{})))
	var err error
	r.ringMem, err = unix.Mmap(r.fd, offSQRing, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("mmap io_uring rings: %w", err)
	}
	r.sqeMem, err = unix.Mmap(r.fd, offSQEs, int(p.SQEntries)*int(unsafe.Sizeof(SQE{})), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("mmap io_uring SQEs: %w", err)
	}
	u32 := func(off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&r.ringMem[off])) }
	r.sqHead, r.sqTail = u32(p.SQOff.Head), u32(p.SQOff.Tail)
	r.sqMask = *u32(p.SQOff.RingMask)
	r.sqes = unsafe.Slice((*SQE)(unsafe.Pointer(&r.sqeMem[0])), p.SQEntries)
	// The indirection array maps ring slots to SQEs; slot i is SQE i.
	array := unsafe.Slice(u32(p.SQOff.Array), p.SQEntries)
	for i := range array {
		array[i] = uint32(i)
	}
	r.sqLocal = atomic.LoadUint32(r.sqTail)
	r.cqHead, r.cqTail = u32(p.CQOff.Head), u32(p.CQOff.Tail)
	r.cqMask = *u32(p.CQOff.RingMask)
	r.cqes = unsafe.Slice((*CQE)(unsafe.Pointer(&r.ringMem[p.CQOff.CQEs])), p.CQEntries)
	return r, nil
}

// Close unmaps the ring and closes it; the kernel cancels what is in flight.
func (r *Ring) Close() error {
	if r.sqeMem != nil {
		unix.Munmap(r.sqeMem)
		r.sqeMem = nil
	}
	if r.ringMem != nil {
		unix.Munmap(r.ringMem)
		r.ringMem = nil
	}
	if r.fd >= 0 {
		unix.Close(r.fd)
		r.fd = -1
	}
	return nil
}

// SQE returns the next free submission entry, zeroed, or nil if the queue
// is full (Submit, then ask again).
func (r *Ring) SQE() *SQE {
	head := atomic.LoadUint32(r.sqHead)
	if r.sqLocal-head > r.sqMask {
		return nil
	}
	e := &r.sqes[r.sqLocal&r.sqMask]
	*e = SQE{}
	r.sqLocal++
	return e
}

// Queued is how many SQEs the next Submit or Wait hands the kernel.
func (r *Ring) Queued() uint32 { return r.sqLocal - atomic.LoadUint32(r.sqHead) }

// Submit hands the kernel every SQE written since the last call, without
// waiting.
func (r *Ring) Submit() error {
	_, err := r.enter(0, 0, nil)
	return err
}

// Wait hands the kernel every SQE written since the last call and waits
// until at least minComplete CQEs are unconsumed, or timeoutNs nanoseconds
// pass (timeoutNs <= 0: no limit). One system call. An expired timeout or
// a signal is not an error: the caller looks at what completed.
func (r *Ring) Wait(minComplete uint32, timeoutNs int64) error {
	if timeoutNs <= 0 {
		_, err := r.enter(minComplete, enterGetEvents, nil)
		return err
	}
	ts := unix.NsecToTimespec(timeoutNs)
	arg := getEventsArg{Ts: uint64(uintptr(unsafe.Pointer(&ts)))}
	_, err := r.enter(minComplete, enterGetEvents|enterExtArg, &arg)
	return err
}

func (r *Ring) enter(minComplete, flags uint32, arg *getEventsArg) (int, error) {
	// Publish: the SQEs' contents before the tail (a release store).
	atomic.StoreUint32(r.sqTail, r.sqLocal)
	toSubmit := r.sqLocal - atomic.LoadUint32(r.sqHead)
	var argp, argSize uintptr
	if arg != nil {
		argp, argSize = uintptr(unsafe.Pointer(arg)), unsafe.Sizeof(*arg)
	}
	var n uintptr
	var errno syscall.Errno
	if flags&enterGetEvents != 0 && minComplete > 0 {
		// May block: let the Go scheduler run other goroutines.
		n, _, errno = unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(toSubmit), uintptr(minComplete), uintptr(flags), argp, argSize)
	} else {
		n, _, errno = unix.RawSyscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(toSubmit), uintptr(minComplete), uintptr(flags), argp, argSize)
	}
	switch errno {
	case 0, unix.ETIME, unix.EINTR:
		return int(n), nil
	case unix.EBUSY, unix.EAGAIN:
		// The completion queue is backed up (or the kernel is short
		// of memory): the caller consumes CQEs and enters again.
		return int(n), nil
	}
	return int(n), fmt.Errorf("io_uring_enter: %w", errno)
}

// Completions returns how many CQEs are ready to be read with CQE.
func (r *Ring) Completions() uint32 {
	return atomic.LoadUint32(r.cqTail) - *r.cqHead
}

// CQE returns a copy of the i-th ready completion (i < Completions()).
func (r *Ring) CQE(i uint32) CQE {
	return r.cqes[(*r.cqHead+i)&r.cqMask]
}

// Consume frees n completions for the kernel to reuse.
func (r *Ring) Consume(n uint32) {
	atomic.StoreUint32(r.cqHead, *r.cqHead+n)
}

// PrepRecv prepares a recv of up to len(b) bytes into b. b must stay
// allocated and untouched until its completion arrives.
func (e *SQE) PrepRecv(fd int, b []byte, userData uint64) {
	e.Opcode = OpRecv
	e.Fd = int32(fd)
	if len(b) > 0 {
		e.Addr = uint64(uintptr(unsafe.Pointer(&b[0])))
	}
	e.Len = uint32(len(b))
	e.UserData = userData
}

// PrepRecvMultishot prepares a recv that stays armed, each completion
// taking one buffer of group (CQEFMore: more will come).
func (e *SQE) PrepRecvMultishot(fd int, group uint16, userData uint64) {
	e.Opcode = OpRecv
	e.Fd = int32(fd)
	e.Flags = SQEBufferSelect
	e.Ioprio = RecvMultishot
	e.BufGroup = group
	e.UserData = userData
}

// PrepSend prepares a send of b with the given msg_flags. b must stay
// allocated and untouched until its completion arrives. With
// unix.MSG_DONTWAIT the send completes during the io_uring_enter that
// submits it, either having sent what fits or with -EAGAIN, instead of
// waiting for room in the socket.
func (e *SQE) PrepSend(fd int, b []byte, msgFlags uint32, userData uint64) {
	e.Opcode = OpSend
	e.Fd = int32(fd)
	if len(b) > 0 {
		e.Addr = uint64(uintptr(unsafe.Pointer(&b[0])))
	}
	e.Len = uint32(len(b))
	e.OpFlags = msgFlags
	e.UserData = userData
}

// PrepRead prepares a read of up to len(b) bytes into b at the current
// file position.
func (e *SQE) PrepRead(fd int, b []byte, userData uint64) {
	e.Opcode = OpRead
	e.Fd = int32(fd)
	if len(b) > 0 {
		e.Addr = uint64(uintptr(unsafe.Pointer(&b[0])))
	}
	e.Len = uint32(len(b))
	e.Off = ^uint64(0) // -1: the file position, as read(2)
	e.UserData = userData
}

// PrepPollAdd prepares a one-shot poll for events (unix.POLLIN...).
func (e *SQE) PrepPollAdd(fd int, events uint32, userData uint64) {
	e.Opcode = OpPollAdd
	e.Fd = int32(fd)
	e.OpFlags = events
	e.UserData = userData
}

// PrepCancel prepares the cancellation of the request submitted with
// target as its user data.
func (e *SQE) PrepCancel(target, userData uint64) {
	e.Opcode = OpAsyncCancel
	e.Fd = -1
	e.Addr = target
	e.UserData = userData
}

// BufRing is a ring of provided buffers: recvs that select a buffer take
// the next one the kernel finds in it; the process gives each back once it
// has consumed its bytes. Owned by the ring's goroutine.
type BufRing struct {
	r       *Ring
	group   uint16
	mem     []byte // the ring of struct io_uring_buf
	data    []byte // the buffers, size bytes each
	size    int
	mask    uint16
	tail    uint16  // ours, published by Publish
	tailPtr *uint32 // the 32-bit word holding the shared 16-bit tail
}

type bufReg struct {
	RingAddr    uint64
	RingEntries uint32
	Bgid        uint16
	Flags       uint16
	Resv        [3]uint64
}

// NewBufRing registers entries (a power of two) buffers of size bytes each
// as buffer group group, all given to the kernel.
func (r *Ring) NewBufRing(group uint16, entries uint16, size int) (*BufRing, error) {
	if entries == 0 || entries&(entries-1) != 0 {
		return nil, errors.New("uring: buffer ring entries must be a power of two")
	}
	mem, err := unix.Mmap(-1, 0, int(entries)*16, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANONYMOUS|unix.MAP_PRIVATE|unix.MAP_POPULATE)
	if err != nil {
		return nil, err
	}
	data, err := unix.Mmap(-1, 0, int(entries)*size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANONYMOUS|unix.MAP_PRIVATE|unix.MAP_POPULATE)
	if err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	reg := bufReg{RingAddr: uint64(uintptr(unsafe.Pointer(&mem[0]))), RingEntries: uint32(entries), Bgid: group}
	_, _, errno := unix.RawSyscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), registerPbufRing, uintptr(unsafe.Pointer(&reg)), 1, 0, 0)
	if errno != 0 {
		unix.Munmap(mem)
		unix.Munmap(data)
		return nil, fmt.Errorf("register buffer ring: %w", errno)
	}
	// The shared tail is the 16-bit field at byte 14 of the ring (the
	// first entry's resv). Go has no 16-bit atomics, so it is stored with
	// a 32-bit atomic on bytes 12-15, which also hold the first entry's
	// bid: only this process writes either, so it can rewrite bid as is.
	b := &BufRing{r: r, group: group, mem: mem, data: data, size: size, mask: entries - 1,
		tailPtr: (*uint32)(unsafe.Pointer(&mem[12]))}
	for i := range entries {
		b.Recycle(i)
	}
	b.Publish()
	return b, nil
}

// Group is the buffer group id to put in SQEs.
func (b *BufRing) Group() uint16 { return b.group }

// Bytes returns the first n bytes of buffer id.
func (b *BufRing) Bytes(id uint16, n int) []byte {
	off := int(id) * b.size
	return b.data[off : off+n : off+b.size]
}

// Recycle gives buffer id back; the kernel sees it after Publish.
func (b *BufRing) Recycle(id uint16) {
	e := unsafe.Slice((*[16]byte)(unsafe.Pointer(&b.mem[0])), int(b.mask)+1)[b.tail&b.mask][:]
	*(*uint64)(unsafe.Pointer(&e[0])) = uint64(uintptr(unsafe.Pointer(&b.data[int(id)*b.size])))
	*(*uint32)(unsafe.Pointer(&e[8])) = uint32(b.size)
	if b.tail&b.mask == 0 {
		// bid of entry 0 shares a word with the tail: write it with the
		// tail's own atomic.
		w := atomic.LoadUint32(b.tailPtr)
		atomic.StoreUint32(b.tailPtr, w&0xffff0000|uint32(id))
	} else {
		*(*uint16)(unsafe.Pointer(&e[12])) = id
	}
	b.tail++
}

// Publish makes every recycled buffer visible to the kernel (a release
// store of the tail).
func (b *BufRing) Publish() {
	w := atomic.LoadUint32(b.tailPtr)
	atomic.StoreUint32(b.tailPtr, w&0xffff|uint32(b.tail)<<16)
}

// Close unregisters and unmaps the buffers. Nothing may still use them.
func (b *BufRing) Close() {
	reg := bufReg{Bgid: b.group}
	unix.RawSyscall6(unix.SYS_IO_URING_REGISTER, uintptr(b.r.fd), unregisterPbufRing, uintptr(unsafe.Pointer(&reg)), 1, 0, 0)
	unix.Munmap(b.mem)
	unix.Munmap(b.data)
}
