package main

import (
	"log"

	"github.com/fedpq/fedpq/transport"
)

const metricsHelp = "serve Prometheus metrics on http://ADDR/metrics (and a server's live page of its run on http://ADDR/), liveness on /healthz and readiness on /readyz (host:port, e.g. :9090; default: none)"

// serveMonitor serves m's metrics and health on addr (--metrics), from
// before the process loads its run, so that liveness probes see it alive
// while it loads; the func it returns stops it.
func serveMonitor(addr string, m transport.Monitored, logger *log.Logger) (func(), error) {
	mon, err := transport.ServeMonitor(addr, m)
	if err != nil {
		return nil, err
	}
	if _, ok := m.(*transport.ServerMetrics); ok {
		logger.Printf("live page of the run on http://%s/, metrics on /metrics, health on /healthz and /readyz", mon.Addr())
	} else {
		logger.Printf("metrics on http://%s/metrics, health on /healthz and /readyz", mon.Addr())
	}
	return func() { mon.Close() }, nil
}
