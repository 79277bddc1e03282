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
	spoolBytes    prometheus.Gauge
	captured      prometheus.Counter
	indexed       prometheus.Counter
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
		indexed:    prometheus.NewCounter(prometheus.CounterOpts{Name: "memwatch_index_bytes_total", Help: "Bytes of searchable files added to the recall index."}),
		captured:   prometheus.NewCounter(prometheus.CounterOpts{Name: "memwatch_spool_captured_lines_total", Help: "Session log lines captured into the spool."}),
		spoolBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "memwatch_spool_bytes", Help: "Bytes the spool of captured session log lines holds on disk."}),
	}
	m.reg.MustRegister(m.jobs, m.bytesArchived, m.watches, m.roots, m.tokens, m.spoolBytes, m.captured, m.indexed,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
