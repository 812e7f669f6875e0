// Command resplat is an open-loop latency tool for RESP servers on a Unix
// socket, finer than redis-benchmark's histogram: it sends one command at a
// fixed total rate over a number of connections, on a schedule that does
// not wait for replies, and records each reply's latency in a log-linear
// histogram (1/64 relative resolution, about 1.6%).
//
// Latency is reported twice. "corrected" is measured from when the request
// was due by the schedule, so a server stall delays every request that
// should have been sent during it (no coordinated omission); "raw" is
// measured from when the request was actually written. The schedule's lag
// (written minus due) is reported too: the client's own timer slop, which
// the corrected figures include.
//
//	resplat -socket /tmp/p.sock -rate 20000 -conns 10 -duration 5s SPEND demo 1
//
// Output: one line of key=value pairs, latencies in microseconds.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/bits"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// hist is a log-linear histogram of nanoseconds: values below 128 exactly,
// above in 64 linear buckets per power of two.
type hist struct {
	counts [64 * 64]uint64
	n      uint64
	max    uint64
}

func bucket(v uint64) int {
	if v < 128 {
		return int(v)
	}
	e := bits.Len64(v) - 7
	return min(e*64+int(v>>e), 64*64-1)
}

// lower returns the smallest value of bucket i.
func lower(i int) uint64 {
	if i < 128 {
		return uint64(i)
	}
	e := i/64 - 1
	return uint64(i%64+64) << e
}

func (h *hist) add(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[bucket(v)]++
	h.n++
	h.max = max(h.max, v)
}

func (h *hist) merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// quantile returns the lower bound of the bucket holding quantile q, in µs.
func (h *hist) quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q * float64(h.n))
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen > rank {
			return float64(lower(i)) / 1e3
		}
	}
	return float64(h.max) / 1e3
}

type sent struct{ due, at time.Time }

// run is one measurement: its schedule and what the readers recorded.
type run struct {
	req                     []byte
	interval                time.Duration
	start, measureFrom, end time.Time

	mu                  sync.Mutex
	corrected, raw, lag hist
	errs, replies       uint64
}

func main() {
	sock := flag.String("socket", "", "Unix socket of the server")
	rate := flag.Float64("rate", 10000, "requests per second, all connections together")
	conns := flag.Int("conns", 10, "connections")
	duration := flag.Duration("duration", 5*time.Second, "how long to measure")
	warmup := flag.Duration("warmup", 500*time.Millisecond, "sent but not measured, first")
	flag.Parse()
	if *sock == "" || flag.NArg() == 0 || *rate <= 0 || *conns <= 0 {
		fmt.Fprintln(os.Stderr, "usage: resplat -socket path [-rate r] [-conns n] [-duration d] command args...")
		os.Exit(2)
	}
	r := &run{req: []byte("*" + strconv.Itoa(flag.NArg()) + "\r\n")}
	for _, a := range flag.Args() {
		r.req = append(r.req, "$"+strconv.Itoa(len(a))+"\r\n"+a+"\r\n"...)
	}
	r.interval = time.Duration(float64(*conns) / *rate * 1e9)
	r.start = time.Now().Add(50 * time.Millisecond)
	r.measureFrom = r.start.Add(*warmup)
	r.end = r.measureFrom.Add(*duration)

	var wg sync.WaitGroup
	for i := range *conns {
		c, err := net.Dial("unix", *sock)
		if err != nil {
			fmt.Fprintln(os.Stderr, "resplat:", err)
			os.Exit(1)
		}
		// Connections start staggered across one interval.
		first := r.start.Add(r.interval * time.Duration(i) / time.Duration(*conns))
		q := make(chan sent, 1<<16)
		wg.Add(2)
		go func() { defer wg.Done(); r.write(c, first, q) }()
		go func() { defer wg.Done(); r.read(c, q) }()
	}
	wg.Wait()
	fmt.Printf("rate=%.0f conns=%d measured=%d achieved_rps=%.0f errors=%d "+
		"p50=%.1f p99=%.1f p999=%.1f max=%.1f raw_p50=%.1f raw_p99=%.1f raw_p999=%.1f lag_p50=%.1f lag_p99=%.1f\n",
		*rate, *conns, r.replies, float64(r.replies)/duration.Seconds(), r.errs,
		r.corrected.quantile(0.5), r.corrected.quantile(0.99), r.corrected.quantile(0.999), float64(r.corrected.max)/1e3,
		r.raw.quantile(0.5), r.raw.quantile(0.99), r.raw.quantile(0.999), r.lag.quantile(0.5), r.lag.quantile(0.99))
	if r.errs > 0 {
		os.Exit(1)
	}
}

// write sends c's requests as they fall due from first, never waiting for
// replies, and queues each one's times for read.
func (r *run) write(c net.Conn, first time.Time, q chan<- sent) {
	runtime.LockOSThread()
	defer close(q)
	buf := make([]byte, 0, 64*len(r.req))
	for k := 0; ; {
		due := first.Add(time.Duration(k) * r.interval)
		if !due.Before(r.end) {
			return
		}
		if d := time.Until(due); d > 0 {
			// nanosleep(2) on this thread: hrtimer precision (tens of
			// µs), where time.Sleep may round a sub-millisecond sleep
			// up to a millisecond.
			ts := unix.NsecToTimespec(int64(d))
			for unix.Nanosleep(&ts, &ts) == unix.EINTR {
			}
		}
		// Everything due by now goes in one write.
		now := time.Now()
		buf = buf[:0]
		var batch []time.Time
		for ; len(batch) < 64; k++ {
			d := first.Add(time.Duration(k) * r.interval)
			if d.After(now) || !d.Before(r.end) {
				break
			}
			buf = append(buf, r.req...)
			batch = append(batch, d)
		}
		at := time.Now()
		if _, err := c.Write(buf); err != nil {
			fmt.Fprintln(os.Stderr, "resplat: write:", err)
			return
		}
		for _, d := range batch {
			q <- sent{due: d, at: at}
		}
	}
}

// read takes one reply per request, in order, records the latencies of
// those due after the warm-up, and adds them to r's totals.
func (r *run) read(c net.Conn, q <-chan sent) {
	defer c.Close()
	rd := bufio.NewReaderSize(c, 64<<10)
	var h, raw, l hist
	var e, n uint64
	for s := range q {
		isErr, err := skipReply(rd)
		if err != nil {
			fmt.Fprintln(os.Stderr, "resplat: read:", err)
			e++
			break
		}
		now := time.Now()
		if isErr {
			e++
		}
		if !s.due.Before(r.measureFrom) {
			n++
			h.add(now.Sub(s.due))
			raw.add(now.Sub(s.at))
			l.add(s.at.Sub(s.due))
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.corrected.merge(&h)
	r.raw.merge(&raw)
	r.lag.merge(&l)
	r.errs += e
	r.replies += n
}

// skipReply reads one RESP reply and reports whether it is an error.
func skipReply(rd *bufio.Reader) (bool, error) {
	line, err := rd.ReadSlice('\n')
	if err != nil {
		return false, err
	}
	if len(line) < 3 {
		return false, errors.New("short reply line")
	}
	switch line[0] {
	case '+', ':', '_', ',', '#':
		return false, nil
	case '-':
		return true, nil
	case '$', '=':
		n, err := strconv.Atoi(string(line[1 : len(line)-2]))
		if err != nil || n < 0 {
			return false, err
		}
		_, err = rd.Discard(n + 2)
		return false, err
	case '*', '%', '~':
		n, err := strconv.Atoi(string(line[1 : len(line)-2]))
		if err != nil {
			return false, err
		}
		if line[0] == '%' {
			n *= 2
		}
		anyErr := false
		for range max(n, 0) {
			e, err := skipReply(rd)
			if err != nil {
				return false, err
			}
			anyErr = anyErr || e
		}
		return anyErr, nil
	}
	return false, io.ErrUnexpectedEOF
}
