package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
	sd "github.com/coreos/go-systemd/v22/daemon"
	"github.com/pacer/pacer/broadcast"
	"github.com/pacer/pacer/config"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/reconcile"
	"github.com/pacer/pacer/transport"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// listen returns the bidders' socket: the one systemd hands over (socket
// activation: a restart keeps it open, so bidders never see "connection
// refused"), or one of our own at path.
func listen(path string, mode os.FileMode, log *zap.Logger) (net.Listener, error) {
	lns, err := activation.Listeners()
	if err != nil {
		return nil, fmt.Errorf("systemd socket activation: %w", err)
	}
	for _, ln := range lns {
		if ln != nil && ln.Addr().Network() == "unix" {
			log.Info("using the socket systemd passed", zap.String("socket", ln.Addr().String()))
			return ln, nil
		}
	}
	if len(lns) > 0 {
		return nil, errors.New("systemd passed sockets, but none is a Unix stream socket")
	}
	ln, err := transport.ListenUnix(path, mode)
	if errors.Is(err, fs.ErrNotExist) {
		// The usual first run: /run/pacer comes from systemd-tmpfiles.
		return nil, fmt.Errorf("%w (create the directory, pass --socket PATH, install with `make install` and run it as the systemd service, or try the dev fleet: `make run`)", err)
	}
	return ln, err
}

// notify sends a state to systemd; outside systemd it does nothing.
func notify(log *zap.Logger, state string) {
	if _, err := sd.SdNotify(false, state); err != nil {
		log.Warn("sd_notify failed", zap.String("state", state), zap.Error(err))
	}
}

// watchdog pings systemd's watchdog while the refill loop is alive: a loop
// stuck for longer than half the watchdog interval stops the pings and systemd
// restarts us. It also refreshes the one-line STATUS.
func watchdog(ctx context.Context, d *daemon.Daemon, log *zap.Logger) {
	interval, err := sd.SdWatchdogEnabled(false)
	if err != nil || interval <= 0 {
		interval = 0
	}
	every := 5 * time.Second
	if interval > 0 {
		every = interval / 3
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if interval > 0 && time.Since(d.LastStep()) < interval/2 {
			notify(log, "WATCHDOG=1")
		}
		notify(log, "STATUS="+status(d))
	}
}

func status(d *daemon.Daemon) string { return statusLine(d.Status()) }

// statusLine formats the daemon's totals for systemd's STATUS= (shown by
// systemctl status), in INFO's key names.
func statusLine(st daemon.Status) string {
	return fmt.Sprintf("serving: campaigns=%d leases_held=%d spend_allowed=%d spend_paced=%d ledger_errors=%d ",
		st.Campaigns, st.LeasesHeld, st.SpendAllowed, st.SpendPaced, st.LedgerErrors)
}

// stateFile remembers the campaigns this daemon served, so that after a
// restart it leases for them again before it reports ready.
const stateFile = "campaigns.json"

func loadCampaigns(dir string) []string {
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil
	}
	var ids []string
	if json.Unmarshal(data, &ids) != nil {
		return nil
	}
	return ids
}

func saveCampaigns(dir string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	data, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	tmp := filepath.Join(dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, data, 0o640); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, stateFile))
}

// adminOptions are the admin listener's settings from the config file.
type adminOptions struct {
	addr        string // loopback host:port, or a Unix socket (config.AdminUnixPath)
	maxConns    int
	idleTimeout time.Duration // 0: never
	pprof       bool
}

// errPprofOverTCP: the profiler shows memory contents (heap profiles name
// campaign ids and auction ids) and costs CPU; on loopback TCP any local
// user could use it.
var errPprofOverTCP = errors.New("--pprof needs the admin listener on a Unix socket (admin: unix:/run/pacer/admin.sock): on TCP every local user could use the profiler")

// listenAdmin opens the admin listener: a Unix socket only pacerd's user can
// open (mode 0600), or loopback TCP, open to every local user. Either way at
// most maxConns connections are served at once; more wait in the backlog.
func listenAdmin(o adminOptions) (net.Listener, error) {
	var ln net.Listener
	var err error
	if path, ok := config.AdminUnixPath(o.addr); ok {
		ln, err = transport.ListenUnix(path, 0o600)
	} else {
		if o.pprof {
			return nil, errPprofOverTCP
		}
		ln, err = net.Listen("tcp", o.addr)
	}
	if err != nil {
		return nil, fmt.Errorf("admin listener: %w", err)
	}
	return newLimitListener(ln, o.maxConns), nil
}

// admin serves /metrics, /healthz, /readyz and, with --pprof, /debug/pprof/
// on the admin listener.
// rc, if not nil, is this host's reconciler candidate: its pass metrics are
// served too (they move only while it leads).
func admin(o adminOptions, d *daemon.Daemon, srv *transport.Server, rc *reconcile.Reconciler, ready *atomic.Bool, bc *broadcast.Broadcaster, log *zap.Logger) (*http.Server, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(metricCollectors(d, srv, rc, bc)...)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if time.Since(d.LastStep()) > 30*time.Second {
			http.Error(w, "refill loop stalled", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", readyz(ready, d.LedgerCheck()))
	if o.pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	ln, err := listenAdmin(o)
	if err != nil {
		return nil, err
	}
	hs := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		// A negative IdleTimeout would fall back to ReadTimeout; "never"
		// is a day here, which an operator asking for 0 will not notice.
		IdleTimeout: o.idleTimeout,
	}
	if o.idleTimeout == 0 {
		hs.IdleTimeout = 24 * time.Hour
	}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin listener stopped", zap.Error(err))
		}
	}()
	log.Info("admin listening", zap.String("addr", ln.Addr().String()), zap.Int("max_conns", o.maxConns), zap.Bool("pprof", o.pprof))
	return hs, nil
}

// metricCollectors are what /metrics serves: the daemon's, the socket's,
// Go's and the process's, the reconciler candidate's (rc, if not nil) and
// the broadcaster's (bc, if not nil). configs/alerts and the Grafana
// dashboard may name only metrics these describe (TestConfigsNameExportedMetrics).
func metricCollectors(d *daemon.Daemon, srv *transport.Server, rc *reconcile.Reconciler, bc *broadcast.Broadcaster) []prometheus.Collector {
	cs := []prometheus.Collector{d.Collector(), socketCollector{srv}, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}
	if rc != nil {
		cs = append(cs, rc.Collectors()...)
	}
	if bc != nil {
		cs = append(cs, broadcastCollector{bc})
	}
	return cs
}

// readyz answers 200 "ready" only while pacerd is up (ready) and takes new
// leases: the ledger gate (gate, nil when pacerd runs without one) is open,
// so Redis answered its last check, meets the durability policy, and this
// host's clock is within the skew bound. Otherwise it answers 503 with the
// reason, "not ready: " and the gate's error. A daemon that refuses leases
// still serves what it holds, so bidders keep their answers; readiness says
// whether it can go on doing so. The gate re-checks every
// ledger.check_interval (every second while closed), so a lost ledger shows
// here within one interval.
func readyz(ready *atomic.Bool, gate func(context.Context) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !ready.Load() {
			http.Error(w, "not ready: starting or stopping", http.StatusServiceUnavailable)
			return
		}
		if gate != nil {
			if err := gate(r.Context()); err != nil {
				// One line: the gate joins its checks' failures with newlines.
				http.Error(w, "not ready: "+strings.ReplaceAll(err.Error(), "\n", "; "), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ready")
	}
}

// socketCollector exports the bidder socket's counters, so that an attack
// on it (connections refused, dropped by a deadline, malformed input) shows
// on the dashboards, not only in INFO.
type socketCollector struct{ srv *transport.Server }

var (
	descSocketOpen     = prometheus.NewDesc("pacer_socket_connections", "Bidder connections open.", nil, nil)
	descSocketAccepted = prometheus.NewDesc("pacer_socket_connections_accepted_total", "Bidder connections accepted.", nil, nil)
	descSocketDropped  = prometheus.NewDesc("pacer_socket_connections_dropped_total",
		"Bidder connections refused or closed by the server, by reason: refused (max clients or peer not allowed, at connect), timeout (idle, read or write deadline), protocol (malformed or oversized request).",
		[]string{"reason"}, nil)
)

func (s socketCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descSocketOpen
	ch <- descSocketAccepted
	ch <- descSocketDropped
}

func (s socketCollector) Collect(ch chan<- prometheus.Metric) {
	st := s.srv.Stats()
	ch <- prometheus.MustNewConstMetric(descSocketOpen, prometheus.GaugeValue, float64(st.ConnectionsOpen))
	ch <- prometheus.MustNewConstMetric(descSocketAccepted, prometheus.CounterValue, float64(st.ConnectionsAccepted))
	ch <- prometheus.MustNewConstMetric(descSocketDropped, prometheus.CounterValue, float64(st.Rejected), "refused")
	ch <- prometheus.MustNewConstMetric(descSocketDropped, prometheus.CounterValue, float64(st.TimedOut), "timeout")
	ch <- prometheus.MustNewConstMetric(descSocketDropped, prometheus.CounterValue, float64(st.ProtocolErrors), "protocol")
}

// limitListener serves at most n connections at once: Accept waits for one
// to close. (golang.org/x/net/netutil.LimitListener does the same; it is
// not a direct dependency.)
type limitListener struct {
	net.Listener
	sem  chan struct{}
	done chan struct{}
	once sync.Once
}

func newLimitListener(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

type broadcastCollector struct{ bc *broadcast.Broadcaster }

var (
	descSent     = prometheus.NewDesc("pacer_broadcasts_sent_total", "NATS events published.", nil, nil)
	descReceived = prometheus.NewDesc("pacer_broadcasts_received_total", "NATS events received and acted on.", nil, nil)
	descDropped  = prometheus.NewDesc("pacer_broadcasts_dropped_total", "NATS messages on pacer subjects that were not well-formed events.", nil, nil)
	descRefused  = prometheus.NewDesc("pacer_broadcasts_refused_total", "Permissions violations the NATS server sent back: this daemon's NATS user may not publish or subscribe there.", nil, nil)
	descRejected = prometheus.NewDesc("pacer_broadcast_rejected_total",
		"Events ignored because they failed authentication (broadcast.key_file): unsigned, forged, stale, replayed or replay-full.", []string{"reason"}, nil)
)

func (b broadcastCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descSent
	ch <- descReceived
	ch <- descDropped
	ch <- descRefused
	ch <- descRejected
}

func (b broadcastCollector) Collect(ch chan<- prometheus.Metric) {
	s := b.bc.Stats()
	ch <- prometheus.MustNewConstMetric(descSent, prometheus.CounterValue, float64(s.Sent))
	ch <- prometheus.MustNewConstMetric(descReceived, prometheus.CounterValue, float64(s.Received))
	ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(s.Dropped))
	ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(s.Refused))
	for _, r := range broadcast.RejectReasons {
		if n, ok := s.Rejected[r]; ok {
			ch <- prometheus.MustNewConstMetric(descRejected, prometheus.CounterValue, float64(n), r)
		}
	}
}
