package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Monitor serves a process's metrics and health over HTTP, beside its
// gRPC service, for Prometheus and for an orchestrator's probes:
//
//	/         a server's live page of its run (page.go)
//	/metrics  the metrics, in Prometheus's text format
//	/healthz  liveness: 200 while the process answers at all
//	/readyz   readiness: 200 while ready says nil, else 503 and why
type Monitor struct {
	srv *http.Server
	lis net.Listener
}

// Monitored is what a Monitor serves: a ServerMetrics or a ClientMetrics.
type Monitored interface {
	Registry() *prometheus.Registry
	Ready() error
}

var (
	_ Monitored = (*ServerMetrics)(nil)
	_ Monitored = (*ClientMetrics)(nil)
)

// ServeMonitor listens on addr (host:port; port 0 picks one) and serves m
// there until Close.
func ServeMonitor(addr string, m Monitored) (*Monitor, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	if p, ok := m.(interface {
		servePage(http.ResponseWriter, *http.Request)
	}); ok {
		mux.HandleFunc("GET /{$}", p.servePage)
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry(), promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := m.Ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mon := &Monitor{lis: lis, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go mon.srv.Serve(lis) // returns ErrServerClosed at Close
	return mon, nil
}

// Addr is the address the monitor listens on.
func (m *Monitor) Addr() string { return m.lis.Addr().String() }

// Close stops serving, letting a scrape under way finish for a second.
func (m *Monitor) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := m.srv.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}
