package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
	sd "github.com/coreos/go-systemd/v22/daemon"
	"github.com/pacer/pacer/daemon"
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
	return transport.ListenUnix(path, mode)
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

func status(d *daemon.Daemon) string {
	var s string
	for _, f := range d.Info() {
		switch f.Key {
		case "campaigns", "leases_held", "spend_allowed", "spend_paced", "ledger_errors":
			s += f.Key + "=" + f.Value + " "
		}
	}
	return "serving: " + s
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

// admin serves /metrics, /healthz, /readyz and, with --pprof, /debug/pprof/
// on the loopback admin address.
func admin(addr string, d *daemon.Daemon, ready *atomic.Bool, bc *transport.Broadcaster, withPprof bool, log *zap.Logger) (*http.Server, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(d.Collector(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if bc != nil {
		reg.MustRegister(broadcastCollector{bc})
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if time.Since(d.LastStep()) > 30*time.Second {
			http.Error(w, "refill loop stalled", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "starting or stopping", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin listener: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin listener stopped", zap.Error(err))
		}
	}()
	log.Info("admin listening", zap.String("addr", ln.Addr().String()))
	return srv, nil
}

type broadcastCollector struct{ bc *transport.Broadcaster }

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
	for _, r := range transport.RejectReasons {
		if n, ok := s.Rejected[r]; ok {
			ch <- prometheus.MustNewConstMetric(descRejected, prometheus.CounterValue, float64(n), r)
		}
	}
}
