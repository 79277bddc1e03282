// Package metrics is the daemon's Prometheus series, on a registry of its own.
package metrics

import (
	"runtime"

	"github.com/memwatch/memwatch/replica"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the daemon's series; each field is one (its help says what).
type Metrics struct {
	Reg           *prometheus.Registry
	Jobs          *prometheus.CounterVec
	BytesArchived prometheus.Counter
	Watches       prometheus.Gauge
	Roots         prometheus.Gauge
	Tokens        *prometheus.CounterVec
	SpoolBytes    prometheus.Gauge
	Captured      prometheus.Counter
	Indexed       prometheus.Counter
	JobSeconds    *prometheus.HistogramVec
	LLMUsed       *prometheus.GaugeVec
	LLMBudget     *prometheus.GaugeVec
	StateBytes    *prometheus.GaugeVec
	ArchiveBytes  *prometheus.GaugeVec
	Kept          *prometheus.GaugeVec
	Versions      prometheus.Counter
	Losses        *prometheus.CounterVec
	LLMFailures   *prometheus.CounterVec
	Refusals      *prometheus.CounterVec
	Bounds        *prometheus.CounterVec
	StateErrors   *prometheus.CounterVec
	Degraded      prometheus.Gauge
}

func New(version string) *Metrics {
	m := &Metrics{
		Reg: prometheus.NewRegistry(),
		JobSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "memwatch_job_duration_seconds", Help: "How long jobs ran, by store and rule (LLM calls included).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}, []string{"store", "rule"}),
		LLMUsed: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "memwatch_llm_tokens_used_today", Help: "LLM tokens used today, by endpoint (compare with memwatch_llm_token_budget)."}, []string{"endpoint"}),
		LLMFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "memwatch_llm_failures_total", Help: "LLM calls that failed, by endpoint and cause (redirect, unreachable, unauthorized, timeout, rate-limited, server-error, budget, error): each meant a fallback or a deferred job."},
			[]string{"endpoint", "cause"}),
		Refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "memwatch_roots_refused_total", Help: "Times a store root was refused (not the owner's, outside the store, a symlink out), by store."},
			[]string{"store"}),
		LLMBudget:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "memwatch_llm_token_budget", Help: "The daily token budget of each LLM endpoint."}, []string{"endpoint"}),
		StateBytes:   prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "memwatch_state_bytes", Help: "Bytes memwatch holds in its state directory, by kind (journal, spool, index)."}, []string{"kind"}),
		ArchiveBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "memwatch_archive_bytes", Help: "Bytes the archives of each store's roots hold (updated hourly)."}, []string{"store"}),
		Kept:         prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "memwatch_kept_copies", Help: "Kept copies in each store's roots: versions of an agent's file met during a rewrite, kept as backups while their lines went into the live file (updated with status and hourly)."}, []string{"store"}),
		Jobs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "memwatch_jobs_total", Help: "Jobs run, by store, rule and outcome."},
			[]string{"store", "rule", "outcome"}),
		BytesArchived: prometheus.NewCounter(prometheus.CounterOpts{Name: "memwatch_archived_bytes_total", Help: "Bytes of pre-images written to archives."}),
		Watches:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "memwatch_watches", Help: "Directories watched with inotify."}),
		Roots:         prometheus.NewGauge(prometheus.GaugeOpts{Name: "memwatch_roots", Help: "Store roots being maintained."}),
		Tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "memwatch_llm_tokens_total", Help: "LLM tokens used, by endpoint."},
			[]string{"endpoint"}),
		Indexed:    prometheus.NewCounter(prometheus.CounterOpts{Name: "memwatch_index_bytes_total", Help: "Bytes of searchable files added to the recall index."}),
		Captured:   prometheus.NewCounter(prometheus.CounterOpts{Name: "memwatch_spool_captured_lines_total", Help: "Session log lines captured into the spool."}),
		SpoolBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "memwatch_spool_bytes", Help: "Bytes the spool of captured session log lines holds on disk."}),
		Versions:   prometheus.NewCounter(prometheus.CounterOpts{Name: "memwatch_versions_captured_total", Help: "Versions of memory files captured (memwatch versions PATH lists them)."}),
		Losses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "memwatch_agent_losses_total", Help: "Memory files an agent deleted, or cut by more than shrink_warn of their lines in one write, by store and kind (deleted, shrunk)."},
			[]string{"store", "kind"}),
		Bounds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "memwatch_bounds_hit_total", Help: "Inputs that hit a bound, skip or refusal (a line or database value cut, a document skipped), by store and the policy key that governs it."},
			[]string{"store", "key"}),
		StateErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "memwatch_state_write_errors_total", Help: "Writes of memwatch's own state that failed (a full or read-only state directory), by what was not recorded (spool, versions, journal)."},
			[]string{"what"}),
		Degraded: prometheus.NewGauge(prometheus.GaugeOpts{Name: "memwatch_state_degraded", Help: "1 while memwatch cannot write its state directory (full, read-only): it retries on its own."}),
	}
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "memwatch_build_info", Help: "Always 1; the labels say which memwatch runs."}, []string{"version", "goversion"})
	info.WithLabelValues(version, runtime.Version()).Set(1)
	m.Reg.MustRegister(m.Jobs, m.BytesArchived, m.Watches, m.Roots, m.Tokens, m.SpoolBytes, m.Captured, m.Indexed,
		m.JobSeconds, m.LLMUsed, m.LLMBudget, m.LLMFailures, m.Refusals, m.Bounds, m.StateErrors, m.Degraded, m.StateBytes, m.ArchiveBytes, m.Kept, m.Versions, m.Losses, info,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// WatchReplica adds the replication's series, read from its status when
// scraped.
func (m *Metrics) WatchReplica(r *replica.Replicator) {
	failures := prometheus.NewCounter(prometheus.CounterOpts{Name: "memwatch_replica_failures_total", Help: "Syncs of the state to the replica bucket that failed (memwatch retries; one WARN per outage)."})
	r.SetOnFail(failures.Inc)
	m.Reg.MustRegister(failures,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "memwatch_replica_lag_seconds", Help: "How long the oldest change of the state not yet in the replica bucket has waited (0: the bucket has everything)."},
			func() float64 { return r.Status().Lag }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "memwatch_replica_last_sync_timestamp_seconds", Help: "When the replica bucket last held every change of the state (Unix time)."},
			func() float64 {
				if t := r.Status().LastSync; !t.IsZero() {
					return float64(t.UnixNano()) / 1e9
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "memwatch_replica_bucket_bytes", Help: "Bytes the state's replica holds in the bucket (snapshots and WAL segments; counted at most once a minute)."},
			func() float64 { return float64(r.Status().Bytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "memwatch_replica_up", Help: "1 while the replica bucket is reachable and replication runs, 0 during an outage or when it was refused."},
			func() float64 {
				if st := r.Status(); st.Outage == "" && st.Refused == "" {
					return 1
				}
				return 0
			}),
	)
}
