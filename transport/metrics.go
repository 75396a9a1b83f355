package transport

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fedpq/fedpq/privacy"
	"github.com/fedpq/fedpq/report"
)

// What a server and a process of clients expose to Prometheus (fedpq
// server and fedpq client --metrics ADDR). Each has a registry of its own,
// not Prometheus's global one, so that a test can run several side by side.
// Every label takes its values from a small fixed set (a message's kind in
// the protocol, a phase, a reason), never a client's id: a fleet of 10,000
// clients is as many series as one client.

// phaseBuckets spans a millisecond to about an hour and a quarter: a
// checkpoint of a small model and a round that waits for its deadline.
var phaseBuckets = prometheus.ExponentialBuckets(0.001, 4, 12)

// ServerMetrics is what a server counts; ServerConfig.Metrics. A nil
// *ServerMetrics counts nothing.
type ServerMetrics struct {
	reg                          *prometheus.Registry
	roundsCompleted              prometheus.Counter
	round, roundsDone, runRounds prometheus.Gauge
	uploads, declines, dropouts  prometheus.Counter
	joinRefusals, refused        *prometheus.CounterVec
	phase                        *prometheus.HistogramVec
	connected, joined            prometheus.Gauge
	epsilon                      *prometheus.GaugeVec
	delta, finished              prometheus.Gauge
	wire                         *wireStats
	serving, over                atomic.Bool

	// For the alerts (deploy/prometheus) and the live page (page.go).
	userEps                     *prometheus.GaugeVec
	userDelta, target, accuracy *prometheus.GaugeVec // no labels: absent until known
	deadline                    *prometheus.GaugeVec // no labels: absent before the first round
	roundTimeout                prometheus.Gauge
	roundClients, roundUploads  prometheus.Gauge
	chosen                      prometheus.Counter
	live                        live

	// Mode async (transport/async.go).
	training, queued prometheus.Gauge
	asyncRefusals    *prometheus.CounterVec
	stale            prometheus.Histogram
}

// Reasons an asynchronous run refuses a client's trained weights before
// they are sent: staler than max_staleness, (announced again in a Join)
// trained from a model version the server has not made, or its task
// withdrawn, not Ready within the task timeout; and the clients of an
// over-selected synchronous round not among the first to finish.
var asyncReasons = []string{"stale", "invalid", "timeout", "over_selected"}

// Join refusals, by what the refusal's gRPC code says: the client is not
// admitted (a wrong or missing token, an identity not on the roster or not
// the one pinned to its id, an unknown id), its Join is malformed or of
// another partition, the server is busy (too many connections joining, a
// rejoin too soon), or it sent no Join in time.
var joinReasons = map[codes.Code]string{
	codes.PermissionDenied:  "denied",
	codes.InvalidArgument:   "invalid",
	codes.ResourceExhausted: "busy",
	codes.DeadlineExceeded:  "timeout",
}

// NewServerMetrics makes a server's metrics, in a registry of their own
// with Go's and the process's (memory, CPU, descriptors).
func NewServerMetrics() *ServerMetrics {
	m := &ServerMetrics{reg: prometheus.NewRegistry()}
	f := factory{m.reg, "fedpq_server_"}
	m.roundsCompleted = f.counter("rounds_completed_total", "Rounds this process completed and checkpointed.")
	m.roundsDone = f.gauge("rounds_done", "Rounds of the run done and checkpointed, those before a restart included.")
	m.runRounds = f.gauge("run_rounds", "Rounds the run has in all.")
	m.round = f.gauge("round", "The round under way, or the last one begun.")
	m.uploads = f.counter("uploads_total", "Uploads counted in a round's aggregate.")
	m.declines = f.counter("declines_total", "Rounds declined by a chosen client.")
	m.dropouts = f.counter("dropouts_total", "Chosen clients whose upload a round did not count: gone, declined, refused or late.")
	m.joinRefusals = f.counterVec("join_refusals_total", "Joins refused, by reason: denied (token, roster, pinned identity, unknown id), invalid (malformed, another partition), busy, timeout.", "reason")
	for _, r := range joinReasons {
		m.joinRefusals.WithLabelValues(r)
	}
	m.refused = f.counterVec("refused_messages_total", "Messages of joined clients refused, by the message's kind in the protocol (upload, key_share, ...).", "kind")
	m.phase = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fedpq_server_phase_seconds", Buckets: phaseBuckets,
		Help: "Time in each phase of a round, as the server's log line of the round gives them: gather (waiting for clients, and planning the round), start (sending the round's start), uploads (then to the last upload or the deadline, training included; plain rounds), each step of secure aggregation (secagg_keys, training included, ... secagg_unmask), aggregate (decoding, the mean, the update and evaluation), checkpoint."},
		[]string{"phase"})
	m.reg.MustRegister(m.phase)
	m.connected = f.gauge("connected_clients", "Clients joined and connected now.")
	m.joined = f.gauge("joined_clients", "Client ids that joined since the server started.")
	m.epsilon = f.gaugeVec("epsilon", "Privacy spent by the client in the most rounds, as seen by observer: the ledger's tightest bound for its whole uploads over the rounds, at delta fedpq_server_epsilon_delta; absent where an observer has no guarantee.", "observer")
	m.delta = f.gauge("epsilon_delta", "The ledger's delta, at which fedpq_server_epsilon holds.")
	m.finished = f.gauge("run_finished", "1 once the run's last round is done and the clients are told.")
	m.wire = newWireStats(f)
	m.userEps = f.gaugeVec("user_epsilon", "User-level privacy spent so far over the whole run by the client in the most rounds, every round it took part in as one guarantee, as seen by observer: model (whoever gets the models), server, eavesdropper; at delta fedpq_server_user_delta. Absent where the run states no user-level guarantee against that observer (yet: DP-FedAvg states it at evaluated rounds).", "observer")
	m.userDelta = f.gaugeVec("user_delta", "The delta at which fedpq_server_user_epsilon{observer=\"model\"} holds.")
	m.target = f.gaugeVec("user_epsilon_target", "The run's user-level privacy budget against whoever gets the models (target_epsilon): the run stops before a round that would pass it. Absent without one.")
	m.accuracy = f.gaugeVec("accuracy", "Test accuracy (0 to 1) of the global model at the last evaluated round: whether the run still learns. Absent before the first evaluation.")
	m.deadline = f.gaugeVec("round_deadline_timestamp_seconds", "Unix time of the deadline of the round under way, or of the last one begun: a run not finished and well past it is stalled (no round ends, or none begins).")
	m.roundTimeout = f.gauge("round_timeout_seconds", "A round's deadline after it starts (--round-timeout): the scale of how late a stalled run is.")
	m.roundClients = f.gauge("round_clients", "Clients chosen for the round under way, or the last one begun: the uploads it expects.")
	m.roundUploads = f.gauge("round_uploads", "Uploads counted so far in the round under way, or the last one begun: against fedpq_server_round_clients.")
	m.chosen = f.counter("chosen_total", "Clients chosen for the rounds completed, counted at completion: fedpq_server_dropouts_total over it is the fraction of expected uploads missing.")
	m.training = f.gauge("async_training_clients", "Mode async: clients given a task and training now (at most the run's concurrency).")
	m.queued = f.gauge("async_queued_updates", "Mode async: clients that finished training and wait, holding their weights, for a buffer.")
	m.asyncRefusals = f.counterVec("async_refused_total", "Mode async: trained weights refused before they were sent (nothing charged), by reason: stale (past max_staleness), invalid (announced again from a model version the server has not made), timeout (the task withdrawn: not Ready within --task-timeout, its slot given to another client); mode sync with over_select: over_selected (sampled and given a task, not among the round's first clients_per_round to finish).", "reason")
	for _, r := range asyncReasons {
		m.asyncRefusals.WithLabelValues(r)
	}
	m.stale = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "fedpq_server_async_staleness", Buckets: []float64{0, 0.5, 1, 2, 4, 8, 16, 32},
		Help: "Mode async: each buffer's mean staleness, in server steps between the model an upload was trained from and the buffer's; its count is the buffers done (rounds_done counts them too)."})
	m.reg.MustRegister(m.stale)
	m.live.init()
	m.reg.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsScheduler)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is where the metrics are, for an HTTP handler (ServeMonitor).
func (m *ServerMetrics) Registry() *prometheus.Registry { return m.reg }

// Ready is the server's readiness: nil while it serves its run's clients.
// A server whose run is over is not ready, lingering or not: it serves no
// client, and a Service should send none to it.
func (m *ServerMetrics) Ready() error {
	if m.over.Load() {
		return errors.New("the run is over: nothing to serve (fedpq_server_run_finished 1)")
	}
	if !m.serving.Load() {
		return errors.New("not serving: loading the run, or stopping")
	}
	return nil
}

// loaded records a run about to be served, done rounds into it, with its
// user-level budget target (0: none) and its rounds' timeout.
func (m *ServerMetrics) loaded(rounds, done int, l *privacy.Ledger, target float64, timeout time.Duration) {
	if m == nil {
		return
	}
	m.runRounds.Set(float64(rounds))
	m.roundsDone.Set(float64(done))
	m.round.Set(float64(done))
	if target > 0 {
		m.target.WithLabelValues().Set(target)
	}
	if timeout > 0 {
		m.roundTimeout.Set(timeout.Seconds())
	}
	m.ledger(l)
	m.live.loaded(rounds, done, target, timeout)
}

func (m *ServerMetrics) setServing(on bool) {
	if m != nil {
		m.serving.Store(on)
		m.live.setServing(on)
	}
}

// ledger sets each observer's eps spent from the ledger l (nil: the
// mechanism is not LDP, and nothing is spent on anyone's behalf).
func (m *ServerMetrics) ledger(l *privacy.Ledger) {
	if m == nil || l == nil {
		return
	}
	m.delta.Set(l.Delta)
	for observer, s := range map[string]*privacy.Spent{"eavesdropper": l.Eavesdropper, "server": l.Server, "partner": l.Partner} {
		if s == nil || s.UploadOptimal == nil {
			m.epsilon.DeleteLabelValues(observer)
			continue
		}
		m.epsilon.WithLabelValues(observer).Set(s.UploadOptimal.Eps)
	}
	m.live.ledger(l)
	// A ledger without a user-level entry (DP-FedAvg's rounds that are not
	// evaluated) leaves the last one standing: it is still what was spent.
	if u := l.User; u != nil {
		for observer, b := range map[string]*privacy.Bound{"model": u.Model, "server": u.Server, "eavesdropper": u.Eavesdropper} {
			if b == nil {
				m.userEps.DeleteLabelValues(observer)
				continue
			}
			m.userEps.WithLabelValues(observer).Set(b.Eps)
		}
		if u.Model != nil {
			m.userDelta.WithLabelValues().Set(u.Model.Delta)
		}
	}
}

// begin records round t begun, with the clients chosen for it and its
// deadline.
func (m *ServerMetrics) begin(t, chosen int, deadline time.Time) {
	if m == nil {
		return
	}
	m.round.Set(float64(t))
	m.roundClients.Set(float64(chosen))
	m.roundUploads.Set(0)
	m.deadline.WithLabelValues().Set(float64(deadline.UnixNano()) / 1e9)
	m.live.begin(t, chosen, deadline)
}

// completed records round r checkpointed, done rounds of the run done.
func (m *ServerMetrics) completed(done int, r *report.Round) {
	if m == nil {
		return
	}
	m.roundsCompleted.Inc()
	m.roundsDone.Set(float64(done))
	m.dropouts.Add(float64(r.Dropped))
	m.chosen.Add(float64(r.Clients + r.Dropped))
	if r.Accuracy != nil {
		m.accuracy.WithLabelValues().Set(*r.Accuracy)
	}
	m.ledger(r.Privacy)
	m.live.completed(done, r)
}

func (m *ServerMetrics) observe(phase string, d time.Duration) {
	if m != nil {
		m.phase.WithLabelValues(phase).Observe(d.Seconds())
	}
}

func (m *ServerMetrics) uploaded() {
	if m != nil {
		m.uploads.Inc()
		m.roundUploads.Inc()
		m.live.uploaded()
	}
}

func (m *ServerMetrics) declined() {
	if m != nil {
		m.declines.Inc()
	}
}

// refusedJoin counts a refused join by its status; errors that are not a
// refusal (the peer went away) are not counted.
func (m *ServerMetrics) refusedJoin(err error) {
	if m == nil {
		return
	}
	if r, ok := joinReasons[status.Code(err)]; ok {
		m.joinRefusals.WithLabelValues(r).Inc()
		m.live.refused()
	}
}

func (m *ServerMetrics) refusedMessage(msg proto.Message) {
	if m != nil {
		m.refused.WithLabelValues(kind(msg)).Inc()
		m.live.refused()
	}
}

// clients records the clients connected and the ids that joined.
func (m *ServerMetrics) clients(connected, joined int) {
	if m != nil {
		m.connected.Set(float64(connected))
		m.joined.Set(float64(joined))
		m.live.clients(connected, joined)
	}
}

func (m *ServerMetrics) runFinished() {
	if m != nil {
		m.finished.Set(1)
		m.over.Store(true)
		m.live.finished()
	}
}

// FoundFinished records a run found over when the server started
// (NewServer's *FinishedError: done of its rounds), for a server that
// stays up after it (fedpq server --linger): its metrics say the run is
// done, as they did when it ended.
func (m *ServerMetrics) FoundFinished(rounds, done int) {
	if m != nil {
		m.loaded(rounds, done, nil, 0, 0)
		m.runFinished()
	}
}

// stats is the gRPC stats handler that counts the server's bytes.
func (m *ServerMetrics) stats() stats.Handler {
	if m == nil {
		return nil
	}
	return m.wire
}

// securePhases names the phases of a secure round's steps, by step; the
// first includes the clients' training.
var securePhases = [...]string{
	secureKeys: "secagg_keys", secureShares: "secagg_shares", secureCheck: "secagg_check",
	secureDisputes: "secagg_disputes", secureMasked: "secagg_masked", secureConsent: "secagg_consent",
	secureUnmask: "secagg_unmask",
}

// factory makes metrics of one prefix in one registry.
type factory struct {
	reg    *prometheus.Registry
	prefix string
}

func (f factory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: f.prefix + name, Help: help})
	f.reg.MustRegister(c)
	return c
}

func (f factory) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: f.prefix + name, Help: help})
	f.reg.MustRegister(g)
	return g
}

func (f factory) counterVec(name, help, label string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: f.prefix + name, Help: help}, []string{label})
	f.reg.MustRegister(c)
	return c
}

// gaugeVec makes a gauge by label, or with no label a gauge that is
// absent until set (WithLabelValues()).
func (f factory) gaugeVec(name, help string, label ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: f.prefix + name, Help: help}, label)
	f.reg.MustRegister(g)
	return g
}

func (f factory) histogram(name, help string) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: f.prefix + name, Help: help, Buckets: phaseBuckets})
	f.reg.MustRegister(h)
	return h
}

// wireStats is a gRPC stats handler that counts the bytes of each message
// on the wire (its encoding and gRPC's framing, not HTTP/2's or TLS's), by
// the message's kind.
type wireStats struct{ in, out *prometheus.CounterVec }

func newWireStats(f factory) *wireStats {
	return &wireStats{
		in:  f.counterVec("received_bytes_total", "Bytes of the messages received (gRPC framing included, HTTP/2 and TLS not), by the message's kind in the protocol.", "kind"),
		out: f.counterVec("sent_bytes_total", "Bytes of the messages sent (gRPC framing included, HTTP/2 and TLS not), by the message's kind in the protocol.", "kind"),
	}
}

func (w *wireStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (w *wireStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (w *wireStats) HandleConn(context.Context, stats.ConnStats) {}

func (w *wireStats) HandleRPC(_ context.Context, s stats.RPCStats) {
	switch p := s.(type) {
	case *stats.InPayload:
		w.in.WithLabelValues(kindOf(p.Payload)).Add(float64(p.WireLength))
	case *stats.OutPayload:
		w.out.WithLabelValues(kindOf(p.Payload)).Add(float64(p.WireLength))
	}
}

func kindOf(payload any) string {
	switch m := payload.(type) {
	case proto.Message:
		return kind(m)
	case *sharedStart:
		return "round_start"
	case *encoded:
		return m.kind
	}
	return "other"
}

// kind is the name of the field a ClientMessage or ServerMessage carries
// (upload, round_start, ...): one of the protocol's, or "empty" for a
// message that carries none the schema knows.
func kind(m proto.Message) string {
	r := m.ProtoReflect()
	body := r.Descriptor().Oneofs().ByName("body")
	if body == nil {
		return "other"
	}
	if f := r.WhichOneof(body); f != nil {
		return string(f.Name())
	}
	return "empty"
}

// asyncClients records an asynchronous run's clients training and queued.
func (m *ServerMetrics) asyncClients(training, queued int) {
	if m != nil {
		m.training.Set(float64(training))
		m.queued.Set(float64(queued))
		m.live.asyncClients(training, queued)
	}
}

// asyncRefused counts trained weights refused for reason (asyncReasons).
func (m *ServerMetrics) asyncRefused(reason string) {
	if m != nil {
		m.asyncRefusals.WithLabelValues(reason).Inc()
	}
}

// staleness records a buffer done, of mean staleness mean.
func (m *ServerMetrics) staleness(mean float64) {
	if m != nil {
		m.stale.Observe(mean)
		m.live.staleness(mean)
	}
}
