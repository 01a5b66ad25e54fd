package craftstore

import (
	"runtime/metrics"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/coredns/coredns/plugin"

	"github.com/craftdns/craftdns/plugin/craftstore/replica"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics of a member, labelled by member id (one process may run one
// member per data directory).
var (
	termGauge = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace, Subsystem: "craftstore", Name: "term",
		Help: "Current Raft term of the member.",
	}, []string{"member"})
	leaderGauge = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace, Subsystem: "craftstore", Name: "is_leader",
		Help: "1 when the member is the Raft leader, 0 otherwise.",
	}, []string{"member"})
	commitGauge = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace, Subsystem: "craftstore", Name: "commit_index",
		Help: "Raft commit index known to the member.",
	}, []string{"member"})
	appliedGauge = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace, Subsystem: "craftstore", Name: "applied_index",
		Help: "Raft index applied to the member's zone data.",
	}, []string{"member"})
	proposalsCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftstore", Name: "proposals_total",
		Help: "Proposals by result: applied, refused (bad input or conflict), unavailable (no quorum in time).",
	}, []string{"member", "result"})
	appliedCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftstore", Name: "applied_entries_total",
		Help: "Raft entries applied.",
	}, []string{"member"})
	applyDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: plugin.Namespace, Subsystem: "craftstore", Name: "apply_duration_seconds",
		Help:    "Time to persist and apply one Raft Ready (one fsync).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
	}, []string{"member"})
	signaturesCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftstore", Name: "dnssec_signatures_total",
		Help: "RRSIGs put in answers (dnssec), by whether the member's signature cache had them (hit) or it signed (miss).",
	}, []string{"member", "result"})
	readyGauge = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace, Subsystem: "craftstore", Name: "ready",
		Help: "1 when the member may answer for its group (it knows a leader, has caught up and its storage works), 0 otherwise.",
	}, []string{"member"})
	storageFailuresCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftstore", Name: "storage_failures_total",
		Help: "Failed attempts to persist or load the member's state (a full disk, an I/O error); the member retries.",
	}, []string{"member"})
	probeGauge = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace, Subsystem: "craftstore", Name: "policy_target_up",
		Help: "On the group's leader, which runs the policies' health checks: 1 when a checked value (its probe: tcp://addr:port, http://addr:port/path) is up, 0 when down.",
	}, []string{"member", "target"})
	checkCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftstore", Name: "policy_checks_total",
		Help: "Health checks of policy values run by this member as its group's leader, by result: ok, failed.",
	}, []string{"member", "result"})
	healthChanges = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftstore", Name: "policy_health_writes_total",
		Help: "Health records this member committed as its group's leader (a policy's values changed state).",
	}, []string{"member"})
	fenceCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftstore", Name: "map_fence_total",
		Help: "Router requests routed by an older shard map than the member's, by what carried them (dns, http) and result: fenced (refused: the router reads the map and asks again) or notice (served, with the newer epoch); behind: routed by a newer map than the member applied even after catching up (answered SERVFAIL Not Ready).",
	}, []string{"via", "result"})
	freshCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftstore", Name: "fresh_reads_total",
		Help: "craftroute's queries by whether the member confirmed with its leader that its state was current (ok), answered past committed entries it had not applied, none of which changes the answer (past), or could not (failed: answered SERVFAIL Not Ready).",
	}, []string{"member", "result"})
	heldReadCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftstore", Name: "held_reads_total",
		Help: "Queries about names that prepared transaction parts held, by result: before (answered from the state before undecided parts), after (the parts finished first: decided), waited (the coordinator could not say: waited for the outcome), held (answered SERVFAIL Not Ready, held).",
	}, []string{"member", "result"})
	staleCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftstore", Name: "stale_responses_total",
		Help: "Queries answered from the member's last state while it was not ready, by action: served or refused (the stale option).",
	}, []string{"member", "action"})
	recordsGauge = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace, Subsystem: "craftstore", Name: "records",
		Help: "Records per zone on the member.",
	}, []string{"member", "zone"})
	perRecordGauge = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace, Subsystem: "craftstore", Name: "heap_bytes_per_record",
		Help: "The process's Go heap in use (its objects' bytes) per record the member holds: what a record costs in anonymous memory, in memory mode or paged (one member per process).",
	}, []string{"member"})
)

// heapSample reads the bytes of the Go heap's live and unswept objects.
var heapSample = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}

// observer feeds the replica's events into the metrics.
type observer struct{ member string }

func (o observer) Applied(n int, d time.Duration) {
	appliedCount.WithLabelValues(o.member).Add(float64(n))
	applyDuration.WithLabelValues(o.member).Observe(d.Seconds())
}

func (o observer) Proposed(err error) {
	result := "applied"
	switch {
	case err == nil:
	case replica.Refused(err):
		result = "refused"
	default:
		result = "unavailable"
	}
	proposalsCount.WithLabelValues(o.member, result).Inc()
}

func (o observer) StorageFailed() { storageFailuresCount.WithLabelValues(o.member).Inc() }

// updateGauges refreshes the gauges from the member's state.
func updateGauges(rep *replica.Replica) {
	id := strconv.FormatUint(rep.ID(), 10)
	st, err := rep.Status()
	if err != nil {
		return
	}
	termGauge.WithLabelValues(id).Set(float64(st.Term))
	commitGauge.WithLabelValues(id).Set(float64(st.Commit))
	appliedGauge.WithLabelValues(id).Set(float64(st.Applied))
	leader := 0.0
	if rep.IsLeader() {
		leader = 1
	}
	leaderGauge.WithLabelValues(id).Set(leader)
	ready := 0.0
	if st.Ready {
		ready = 1
	}
	readyGauge.WithLabelValues(id).Set(ready)
	zones := map[string]bool{}
	total := 0
	for _, o := range rep.Zones() {
		if z := rep.Zone(o); z != nil {
			recordsGauge.WithLabelValues(id, o).Set(float64(z.Records()))
			zones[o] = true
			total += z.Records()
		}
	}
	if total > 0 {
		s := slices.Clone(heapSample)
		metrics.Read(s)
		if s[0].Value.Kind() == metrics.KindUint64 {
			perRecordGauge.WithLabelValues(id).Set(float64(s[0].Value.Uint64()) / float64(total))
		}
	}
	// A deleted zone's series goes with it.
	reportedMu.Lock()
	defer reportedMu.Unlock()
	for o := range reported[id] {
		if !zones[o] {
			recordsGauge.DeleteLabelValues(id, o)
		}
	}
	reported[id] = zones
}

// reported holds, per member, the zones that have a records series.
var (
	reportedMu sync.Mutex
	reported   = map[string]map[string]bool{}
)
