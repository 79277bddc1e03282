package daemon

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the daemon's Prometheus series, on a registry of its own.
type metrics struct {
	reg           *prometheus.Registry
	jobs          *prometheus.CounterVec
	bytesArchived prometheus.Counter
	watches       prometheus.Gauge
	roots         prometheus.Gauge
	tokens        *prometheus.CounterVec
	tailLag       prometheus.Gauge
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "memwatch_jobs_total", Help: "Jobs run, by store, rule and outcome."},
			[]string{"store", "rule", "outcome"}),
		bytesArchived: prometheus.NewCounter(prometheus.CounterOpts{Name: "memwatch_archived_bytes_total", Help: "Bytes of pre-images written to archives."}),
		watches:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "memwatch_watches", Help: "Directories watched with inotify."}),
		roots:         prometheus.NewGauge(prometheus.GaugeOpts{Name: "memwatch_roots", Help: "Store roots being maintained."}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "memwatch_llm_tokens_total", Help: "LLM tokens used, by endpoint."},
			[]string{"endpoint"}),
		tailLag: prometheus.NewGauge(prometheus.GaugeOpts{Name: "memwatch_tail_lag_bytes", Help: "Bytes of conversation logs not yet read by a tailer."}),
	}
	m.reg.MustRegister(m.jobs, m.bytesArchived, m.watches, m.roots, m.tokens, m.tailLag,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
