// Package faultproxy is a Redis proxy for fault-injection tests: it listens on
// a Unix socket of its own, forwards every connection to a real redis-server,
// and injects, on demand, the faults a ledger client must survive:
//
//   - a reset after a request: the next command matching a predicate is
//     forwarded, Redis runs it and answers, and the proxy drops that answer and
//     closes the client's connection. The command took effect but the client
//     never learnt it: exactly the case in which go-redis retries.
//   - a partition: every connection is closed and new ones are refused (closed
//     at once) until Heal.
//   - a delay before each command is forwarded.
//
// The proxy handles one command at a time per connection (it reads the
// command, forwards it, reads Redis's whole reply, then writes it back), so
// pipelines still work, only without overlap. It speaks RESP2 and RESP3.
//
// A Proxy is safe for concurrent use.
package faultproxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Matcher decides whether a command (its name and arguments, as the client
// sent them) is the one a fault applies to.
type Matcher func(cmd []string) bool

// Scripts matches the commands that run a Lua script (EVALSHA, EVAL, FCALL
// and their read-only forms).
func Scripts(cmd []string) bool {
	if len(cmd) == 0 {
		return false
	}
	switch strings.ToUpper(cmd[0]) {
	case "EVALSHA", "EVAL", "EVALSHA_RO", "EVAL_RO", "FCALL", "FCALL_RO":
		return true
	}
	return false
}

// Commands matches commands by name, case-insensitively.
func Commands(names ...string) Matcher {
	return func(cmd []string) bool {
		if len(cmd) == 0 {
			return false
		}
		for _, n := range names {
			if strings.EqualFold(cmd[0], n) {
				return true
			}
		}
		return false
	}
}

// Any matches every command.
func Any([]string) bool { return true }

// Proxy forwards connections to one redis-server. Create it with Start and
// stop it with Close.
type Proxy struct {
	// Socket is the Unix socket clients connect to.
	Socket string

	upstream string
	dir      string
	ln       net.Listener

	mu          sync.Mutex
	conns       map[*conn]struct{}
	resets      []Matcher // armed one-shot resets, oldest first
	partitioned bool
	delay       time.Duration
	closed      bool

	fired     atomic.Int64
	forwarded atomic.Int64
	wg        sync.WaitGroup
}

// Start listens on a new Unix socket in a temporary directory and forwards
// every connection to the redis-server listening on the Unix socket upstream.
func Start(upstream string) (*Proxy, error) {
	// Unix socket paths are limited to ~104 bytes: keep the directory short.
	dir, err := os.MkdirTemp("", "pacer-fp-")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Socket: filepath.Join(dir, "proxy.sock"), upstream: upstream, dir: dir, conns: map[*conn]struct{}{}}
	if p.ln, err = net.Listen("unix", p.Socket); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Close stops listening, closes every connection, waits for the proxy's
// goroutines and removes its socket.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.cut()
	p.wg.Wait()
	os.RemoveAll(p.dir)
	return err
}

// ResetAfter arms a one-shot fault: the next command matching m (on any
// connection) reaches Redis, and its reply is dropped and the client's
// connection closed. Several armed resets fire in the order they were armed.
func (p *Proxy) ResetAfter(m Matcher) {
	p.mu.Lock()
	p.resets = append(p.resets, m)
	p.mu.Unlock()
}

// Disarm drops the resets armed and not yet fired, and returns how many.
func (p *Proxy) Disarm() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.resets)
	p.resets = nil
	return n
}

// Fired returns how many armed resets have fired.
func (p *Proxy) Fired() int64 { return p.fired.Load() }

// Forwarded returns how many commands reached Redis through the proxy.
func (p *Proxy) Forwarded() int64 { return p.forwarded.Load() }

// Partition closes every connection and refuses new ones until Heal.
func (p *Proxy) Partition() {
	p.mu.Lock()
	p.partitioned = true
	p.mu.Unlock()
	p.cut()
}

// Heal ends a partition.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.partitioned = false
	p.mu.Unlock()
}

// Cut closes every open connection without refusing new ones.
func (p *Proxy) Cut() { p.cut() }

// SetDelay makes the proxy wait d before forwarding each command (0: none).
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

func (p *Proxy) cut() {
	p.mu.Lock()
	conns := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		cl, err := p.ln.Accept()
		if err != nil {
			return // listener closed
		}
		p.mu.Lock()
		refuse := p.partitioned || p.closed
		p.mu.Unlock()
		if refuse {
			cl.Close()
			continue
		}
		up, err := net.Dial("unix", p.upstream)
		if err != nil {
			cl.Close() // Redis is down: the client sees what it would see without us
			continue
		}
		c := &conn{client: cl, upstream: up}
		p.mu.Lock()
		if p.partitioned || p.closed {
			p.mu.Unlock()
			c.close()
			continue
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(1)
		go p.serve(c)
	}
}

type conn struct {
	client, upstream net.Conn
	once             sync.Once
}

func (c *conn) close() {
	c.once.Do(func() {
		c.client.Close()
		c.upstream.Close()
	})
}

// serve relays one connection, a command and its reply at a time.
func (p *Proxy) serve(c *conn) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		c.close()
	}()
	fromClient := bufio.NewReader(c.client)
	fromRedis := bufio.NewReader(c.upstream)
	for {
		raw, cmd, err := readCommand(fromClient)
		if err != nil {
			return
		}
		p.mu.Lock()
		delay := p.delay
		reset := false
		for i, m := range p.resets {
			if m(cmd) {
				p.resets = append(p.resets[:i:i], p.resets[i+1:]...)
				reset = true
				break
			}
		}
		p.mu.Unlock()
		if delay > 0 {
			time.Sleep(delay)
		}
		if _, err := c.upstream.Write(raw); err != nil {
			return
		}
		p.forwarded.Add(1)
		reply, err := readReply(fromRedis)
		if err != nil {
			return
		}
		if reset {
			p.fired.Add(1)
			return // the command ran; its reply is dropped with the connection
		}
		if _, err := c.client.Write(reply); err != nil {
			return
		}
	}
}

// maxBulk bounds one bulk string, so a corrupt stream cannot make the proxy
// allocate without limit.
const maxBulk = 512 << 20

// readCommand reads one client command: a RESP array of bulk strings, or an
// inline command line. It returns the raw bytes to forward and the parsed
// command.
func readCommand(r *bufio.Reader) ([]byte, []string, error) {
	line, err := readLine(r)
	if err != nil {
		return nil, nil, err
	}
	if len(line) < 3 || line[0] != '*' {
		return line, strings.Fields(string(line)), nil // inline command
	}
	n, err := strconv.Atoi(string(line[1 : len(line)-2]))
	if err != nil || n < 0 || n > 1<<20 {
		return nil, nil, fmt.Errorf("faultproxy: bad array header %q", line)
	}
	raw := append([]byte(nil), line...)
	cmd := make([]string, 0, n)
	for range n {
		h, err := readLine(r)
		if err != nil {
			return nil, nil, err
		}
		if len(h) < 3 || h[0] != '$' {
			return nil, nil, fmt.Errorf("faultproxy: want a bulk string, got %q", h)
		}
		size, err := strconv.Atoi(string(h[1 : len(h)-2]))
		if err != nil || size < 0 || size > maxBulk {
			return nil, nil, fmt.Errorf("faultproxy: bad bulk header %q", h)
		}
		body := make([]byte, size+2)
		if _, err := io.ReadFull(r, body); err != nil {
			return nil, nil, err
		}
		raw = append(append(raw, h...), body...)
		cmd = append(cmd, string(body[:size]))
	}
	return raw, cmd, nil
}

// readReply reads one whole reply (RESP2 or RESP3) and returns its bytes.
// Out-of-band push messages before it are included.
func readReply(r *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		var push bool
		var err error
		buf, push, err = appendValue(buf, r)
		if err != nil {
			return nil, err
		}
		if !push {
			return buf, nil
		}
	}
}

var errProtocol = errors.New("faultproxy: malformed reply from redis-server")

// appendValue appends one RESP value read from r to buf. push reports an
// out-of-band push message (RESP3 '>'), after which the reply still follows.
func appendValue(buf []byte, r *bufio.Reader) (out []byte, push bool, err error) {
	line, err := readLine(r)
	if err != nil {
		return nil, false, err
	}
	buf = append(buf, line...)
	if len(line) < 3 {
		return nil, false, errProtocol
	}
	kind := line[0]
	switch kind {
	case '+', '-', ':', ',', '#', '_', '(':
		return buf, false, nil
	case '$', '=', '!':
		n, err := strconv.Atoi(string(line[1 : len(line)-2]))
		if err != nil || n > maxBulk {
			return nil, false, errProtocol
		}
		if n < 0 {
			return buf, false, nil
		}
		body := make([]byte, n+2)
		if _, err := io.ReadFull(r, body); err != nil {
			return nil, false, err
		}
		return append(buf, body...), false, nil
	case '*', '~', '>', '%', '|':
		n, err := strconv.Atoi(string(line[1 : len(line)-2]))
		if err != nil || n > 1<<24 {
			return nil, false, errProtocol
		}
		if kind == '%' || kind == '|' {
			n *= 2
		}
		for range max(n, 0) {
			if buf, _, err = appendValue(buf, r); err != nil {
				return nil, false, err
			}
		}
		if kind == '|' { // attributes precede the value they describe
			buf, push, err = appendValue(buf, r)
			return buf, push, err
		}
		return buf, kind == '>', nil
	}
	return nil, false, errProtocol
}

func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, errProtocol
		}
		return nil, err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, errProtocol
	}
	return append([]byte(nil), line...), nil
}
