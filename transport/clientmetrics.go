package transport

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc/stats"
)

// ClientMetrics is what the clients of one process count, together: one
// object that every Client of a fleet shares (ClientConfig.Metrics), with
// no label per client. A nil *ClientMetrics counts nothing.
type ClientMetrics struct {
	reg                      *prometheus.Registry
	running, connected       atomic.Int64
	failed                   atomic.Int64
	failures                 prometheus.Counter
	rounds, uploads, refused prometheus.Counter
	reconnects               prometheus.Counter
	declines                 *prometheus.CounterVec
	training, encoding       prometheus.Histogram
	wire                     *wireStats
}

// Why a client declines a round: it answered the round before (a restarted
// server asks again), the round's secure aggregation is not the run's, the
// round fails the client's policy (its threshold, graph or size), masking
// failed, its external trainer failed, or (mode async) it does not hold
// the weights a buffer asks for.
var declineReasons = []string{"answered", "mismatch", "policy", "masking", "trainer", "held"}

// NewClientMetrics makes the metrics of a process's clients, in a registry
// of their own with Go's and the process's.
func NewClientMetrics() *ClientMetrics {
	m := &ClientMetrics{reg: prometheus.NewRegistry()}
	f := factory{m.reg, "fedpq_client_"}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "fedpq_client_clients_running", Help: "Clients of this process taking part in a run (connected or reconnecting)."},
			func() float64 { return float64(m.running.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "fedpq_client_clients_connected", Help: "Clients of this process joined to the server now."},
			func() float64 { return float64(m.connected.Load()) }),
	)
	m.failures = f.counter("clients_failed_total", "Clients that stopped on an error: refused by the server, unable to run the run, or without a server for --retry-for.")
	m.rounds = f.counter("rounds_total", "Rounds the clients were chosen for (a round's start received).")
	m.uploads = f.counter("uploads_total", "Uploads sent, plain or masked.")
	m.refused = f.counter("upload_refusals_total", "Uploads the server's receipt refused.")
	m.reconnects = f.counter("reconnects_total", "Times a client lost its session and connected again.")
	m.declines = f.counterVec("declines_total", "Rounds declined, by reason: answered (before a server restart), mismatch, policy, masking, trainer.", "reason")
	for _, r := range declineReasons {
		m.declines.WithLabelValues(r)
	}
	m.training = f.histogram("training_seconds", "Local training time of a round; in a fleet, with the wait for a free one of its --workers trainers.")
	m.encoding = f.histogram("encoding_seconds", "Time to encode a round's update with the mechanism.")
	m.wire = newWireStats(f)
	m.reg.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsScheduler)), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is where the metrics are, for an HTTP handler (ServeMonitor).
func (m *ClientMetrics) Registry() *prometheus.Registry { return m.reg }

// Ready is the readiness of the process's clients: nil while at least one
// runs (connected, or reconnecting within its RetryFor) and none stopped
// on an error.
func (m *ClientMetrics) Ready() error {
	switch failed, running := m.failed.Load(), m.running.Load(); {
	case failed > 0:
		return fmt.Errorf("%d clients stopped on an error", failed)
	case running == 0:
		return errors.New("no client running")
	}
	return nil
}

// started counts a client's Run; the func it returns counts its end, with
// the error it ended with (nil: the run finished; a cancelled context: the
// client was stopped, which is no failure).
func (m *ClientMetrics) started() func(failed bool) {
	if m == nil {
		return func(bool) {}
	}
	m.running.Add(1)
	return func(failed bool) {
		m.running.Add(-1)
		if failed {
			m.failed.Add(1)
			m.failures.Inc()
		}
	}
}

// joined counts a session; the func it returns counts its end.
func (m *ClientMetrics) joined() func() {
	if m == nil {
		return func() {}
	}
	m.connected.Add(1)
	return func() { m.connected.Add(-1) }
}

func (m *ClientMetrics) reconnecting() {
	if m != nil {
		m.reconnects.Inc()
	}
}

func (m *ClientMetrics) roundStarted() {
	if m != nil {
		m.rounds.Inc()
	}
}

func (m *ClientMetrics) uploaded() {
	if m != nil {
		m.uploads.Inc()
	}
}

func (m *ClientMetrics) uploadRefused() {
	if m != nil {
		m.refused.Inc()
	}
}

func (m *ClientMetrics) declined(reason string) {
	if m != nil {
		m.declines.WithLabelValues(reason).Inc()
	}
}

func (m *ClientMetrics) trained(d time.Duration) {
	if m != nil {
		m.training.Observe(d.Seconds())
	}
}

func (m *ClientMetrics) encoded(d time.Duration) {
	if m != nil {
		m.encoding.Observe(d.Seconds())
	}
}

// stats is the gRPC stats handler that counts the clients' bytes.
func (m *ClientMetrics) stats() stats.Handler {
	if m == nil {
		return nil
	}
	return m.wire
}
