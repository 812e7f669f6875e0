package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/config"
	"github.com/pacer/pacer/transport"
)

// waitForSocket waits for pacerd to create a socket file.
func waitForSocket(t *testing.T, p *proc, path string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no socket at %s within 10s:\n%s", path, p.Output.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func unixHTTP(path string) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		},
	}}
}

func get(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// The admin listener on a Unix socket: mode 0600, and the only place
// --pprof is served.
func TestAdminUnixSocketWithPprof(t *testing.T) {
	s := newStack(t)
	s.campaign("c", 86_400_000)
	sock := filepath.Join(s.dir, "admin.sock")
	p := s.startWith("h1", []string{"--admin", "unix:" + sock, "--pprof"}, nil)
	waitForSocket(t, p, sock)
	fi, err := os.Lstat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin socket mode %v, want a socket with 0600", fi.Mode())
	}
	c := unixHTTP(sock)
	// /healthz says 503 until the refill loop's first step.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if code, _ := get(t, c, "http://pacerd/healthz"); code == http.StatusOK {
			break
		}
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/debug/pprof/"} {
		if code, body := get(t, c, "http://pacerd"+path); code != http.StatusOK {
			t.Errorf("%s = %d %q", path, code, body)
		}
	}
	if _, body := get(t, c, "http://pacerd/metrics"); !strings.Contains(body, "pacer_spend_decisions_total") {
		t.Errorf("/metrics lacks pacer metrics")
	}
}

// --pprof with a TCP admin listener (or none) is refused at start.
func TestPprofRefusedOverTCP(t *testing.T) {
	for _, admin := range []string{"127.0.0.1:9464", "localhost:9", ""} {
		var stderr bytes.Buffer
		err := run(context.Background(), []string{"--admin", admin, "--pprof", "--socket", "/nonexistent/pacer.sock"}, io.Discard, &stderr)
		if err == nil || !strings.Contains(err.Error(), "--pprof needs the admin listener") {
			t.Errorf("admin %q: err = %v, want --pprof refused", admin, err)
		}
	}
	if !strings.Contains(errPprofOverTCP.Error(), "Unix socket") {
		t.Fatal(errPprofOverTCP)
	}
}

// A flood of keep-alive connections to the admin listener waits for
// admin_max_conns to free up (bidders are never touched), and idle ones are
// closed after admin_idle_timeout.
func TestAdminConnectionLimitAndIdleTimeout(t *testing.T) {
	s := newStack(t)
	s.campaign("c", 86_400_000)
	s.extraConfig = "admin_max_conns: 2\nadmin_idle_timeout: 400ms\n"
	addr := freeLoopbackAddr(t)
	p := s.startWith("h1", []string{"--admin", addr}, nil)
	var held []*bufio.Reader
	var conns []net.Conn
	deadline := time.Now().Add(10 * time.Second)
	request := "GET /healthz HTTP/1.1\r\nHost: pacerd\r\n\r\n"
	for len(conns) < 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			if time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, request)
		rd := bufio.NewReader(c)
		resp, err := http.ReadResponse(rd, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		conns, held = append(conns, c), append(held, rd)
	}
	start := time.Now()
	// Both slots are held by idle keep-alive connections: a third waits.
	third, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	io.WriteString(third, request)
	third.SetReadDeadline(time.Now().Add(150 * time.Millisecond))
	rd3 := bufio.NewReader(third)
	if _, err := rd3.Peek(1); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("third connection answered while two were held (%v)", err)
	}
	// Meanwhile the bidders' socket answers.
	if dec, err := dial(t, p.socket).Spend(ctx, "c", 1, ""); err != nil {
		t.Fatalf("SPEND during the admin flood: %v, %v", dec, err)
	}
	// The idle ones are closed after admin_idle_timeout; then the third is served.
	for i, rd := range held {
		if _, err := rd.ReadByte(); err != io.EOF {
			t.Fatalf("held connection %d: %v, want closed by the idle timeout", i, err)
		}
	}
	third.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(rd3, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if waited := time.Since(start); resp.StatusCode != http.StatusOK || waited < 300*time.Millisecond {
		t.Fatalf("third connection: %d after %v", resp.StatusCode, waited)
	}
}

func TestServerConfigMapping(t *testing.T) {
	cfg := config.DefaultDaemon()
	sc := serverConfig(cfg, nil, nil)
	if sc.MaxClients != 10_000 || sc.IdleTimeout != 5*time.Minute || sc.ReadTimeout != 10*time.Second ||
		sc.WriteTimeout != 10*time.Second || len(sc.AllowedUIDs) != 0 || len(sc.AllowedGIDs) != 0 ||
		sc.MaxBufferedBytes != transport.DefaultMaxBufferedBytes {
		t.Errorf("defaults: %+v", sc)
	}
	cfg.MaxBufferedBytes = 3 << 20
	if sc = serverConfig(cfg, nil, nil); sc.MaxBufferedBytes != 3<<20 {
		t.Errorf("max_buffered_bytes 3 MiB reached the server as %d", sc.MaxBufferedBytes)
	}
	cfg.ClientIdleTimeout, cfg.ClientReadTimeout, cfg.ClientWriteTimeout = 0, 0, 0
	cfg.AllowedUIDs, cfg.AllowedGIDs = []int64{0, 4294967294}, []int64{998}
	sc = serverConfig(cfg, nil, nil)
	if sc.IdleTimeout >= 0 || sc.ReadTimeout >= 0 || sc.WriteTimeout >= 0 {
		t.Errorf("0s must mean never (negative for transport): %+v", sc)
	}
	if len(sc.AllowedUIDs) != 2 || sc.AllowedUIDs[1] != 4294967294 || sc.AllowedGIDs[0] != 998 {
		t.Errorf("ids: %v %v", sc.AllowedUIDs, sc.AllowedGIDs)
	}
}

// The bidder socket's limits reach the server from the config file.
func TestSocketLimitsFromConfig(t *testing.T) {
	s := newStack(t)
	s.extraConfig = "max_clients: 2\nclient_read_timeout: 300ms\n"
	adminSock := filepath.Join(s.dir, "admin.sock")
	p := s.startWith("h1", []string{"--admin", "unix:" + adminSock}, nil)
	ping := func(c net.Conn, rd *bufio.Reader) string {
		io.WriteString(c, "PING\r\n")
		line, _ := rd.ReadString('\n')
		return line
	}
	open := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("unix", p.socket)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(10 * time.Second))
		return c, bufio.NewReader(c)
	}
	// startWith's probe connection may still be open for a moment.
	var c1, c2 net.Conn
	var r1, r2 *bufio.Reader
	refusedEarly := 0 // refusals while the probe still held its slot
	for deadline := time.Now().Add(5 * time.Second); ; {
		c1, r1 = open()
		got := ping(c1, r1)
		if got == "+PONG\r\n" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("first connection: %q", got)
		}
		if got == "-ERR max clients reached\r\n" {
			refusedEarly++
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The probe's slot is freed when the server sees it closed (with the
	// epoll server, on a later wake-up of its loop): until then a second
	// connection may be the one over the cap.
	for deadline := time.Now().Add(5 * time.Second); ; {
		c2, r2 = open()
		got := ping(c2, r2)
		if got == "+PONG\r\n" {
			break
		}
		c2.Close()
		if got != "-ERR max clients reached\r\n" || time.Now().After(deadline) {
			t.Fatalf("second connection: %q", got)
		}
		refusedEarly++
		time.Sleep(10 * time.Millisecond)
	}
	c3, r3 := open()
	if got, _ := r3.ReadString('\n'); got != "-ERR max clients reached\r\n" {
		t.Fatalf("third connection: %q", got)
	}
	// A stalled half request is dropped after client_read_timeout.
	start := time.Now()
	io.WriteString(c1, "*1\r\n$4\r\nPI")
	if _, err := r1.ReadByte(); err != io.EOF {
		t.Fatalf("stalled connection: %v, want closed", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("stalled connection closed after %v", d)
	}
	_ = c3
	if c4, r4 := open(); ping(c4, r4) != "+PONG\r\n" {
		t.Fatal("no room after the stalled connection was dropped")
	}
	// The admin listener's metrics show it.
	waitForSocket(t, p, adminSock)
	_, body := get(t, unixHTTP(adminSock), "http://pacerd/metrics")
	for _, want := range []string{
		fmt.Sprintf(`pacer_socket_connections_dropped_total{reason="refused"} %d`, 1+refusedEarly),
		`pacer_socket_connections_dropped_total{reason="timeout"} 1`,
		`pacer_socket_connections_dropped_total{reason="protocol"} 0`,
		"pacer_socket_connections 2",
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestFileLimitProblem(t *testing.T) {
	if msg := fileLimitProblem(10_000, 65_536); msg != "" {
		t.Errorf("the unit's defaults: %q", msg)
	}
	if msg := fileLimitProblem(10_000, 10_100); !strings.Contains(msg, "LimitNOFILE") {
		t.Errorf("max_clients near the limit: %q", msg)
	}
}
