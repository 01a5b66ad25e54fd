package craftroute

import (
	"github.com/coredns/coredns/plugin"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics of the router. Shards are labelled by name, members by their DNS
// address.
var (
	requestCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftroute", Name: "requests_total",
		Help: "Responses received from shard members, by rcode.",
	}, []string{"shard", "member", "rcode"})
	requestDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: plugin.Namespace, Subsystem: "craftroute", Name: "request_duration_seconds",
		Buckets: plugin.TimeBuckets,
		Help:    "Time of the router's queries to a shard, from the first try to the answer used: failovers and the retries of names held by a transaction included.",
	}, []string{"shard"})
	failoverCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftroute", Name: "failovers_total",
		Help: "Queries sent to the next member of a shard after a timeout, error or SERVFAIL.",
	}, []string{"shard"})
	memberDown = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace, Subsystem: "craftroute", Name: "member_down",
		Help: "1 while a member is marked down (from a failure to the next success), 0 otherwise.",
	}, []string{"shard", "member"})
	probeCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftroute", Name: "probes_total",
		Help: "Probes of members marked down, by result: ok (any response) or fail.",
	}, []string{"shard", "member", "result"})
	signaturesCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftroute", Name: "dnssec_signatures_total",
		Help: "RRSIGs put in answers (dnssec), by whether the router's signature cache had them (hit) or it signed (miss).",
	}, []string{"result"})
	migrationState = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: plugin.Namespace, Subsystem: "craftroute", Name: "migration",
		Help: "The shard map's migration: 0 none, 1 a shard is being added, 2 a shard is being removed.",
	})
	migratedPartitions = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftroute", Name: "migrated_partitions_total",
		Help: "Partitions this router moved from one shard to another (adding or removing a shard).",
	})
	migratedRecords = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftroute", Name: "migrated_records_total",
		Help: "Records of the partitions this router moved from one shard to another.",
	})
	migrateHold = promauto.NewHistogram(prometheus.HistogramOpts{
		Namespace: plugin.Namespace, Subsystem: "craftroute", Name: "migration_hold_seconds",
		Buckets: plugin.TimeBuckets,
		Help:    "Time a migration step held writes to the partitions it moved (a join: every partition of one shard), from its first part's prepare to its commit.",
	})
	mapEpoch = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: plugin.Namespace, Subsystem: "craftroute", Name: "shard_map_epoch",
		Help: "The epoch of the shard map the router routes by; 0 before it has read one (it routes by its Corefile).",
	})
	mapUnreachableGauge = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: plugin.Namespace, Subsystem: "craftroute", Name: "shard_map_unreachable",
		Help: "1 while the router's last read of the shard map reached no member: it routes by the last map it has.",
	})
	staleMaps = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftroute", Name: "stale_map_total",
		Help: "Requests a member refused because the router routed them by an older shard map: the router read the map and routed them again.",
	})
	broadcasts = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftroute", Name: "broadcasts_total",
		Help: "Negative answers of an owner shard that were checked with every shard.",
	})
	fastRelayed = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftroute", Name: "fast_relayed_total",
		Help: "Queries answered on the fast path: a member's answer relayed as bytes.",
	})
	fastDeclined = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftroute", Name: "fast_declined_total",
		Help: "Queries sent on the fast path whose answer the router had to unpack and complete (merges, CNAME chains, serials, glue, truncation, other options).",
	})
	filterSkips = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftroute", Name: "filter_skips_total",
		Help: "Negative answers of an owner shard that the other shards' existence filters made final: no broadcast.",
	})
	filterFetches = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftroute", Name: "filter_fetches_total",
		Help: "Fetches of a zone's existence filters from every shard, by result (ok, failed).",
	}, []string{"result"})
	filterBytes = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: plugin.Namespace, Subsystem: "craftroute", Name: "filter_bytes",
		Help: "Bytes of existence filters the router keeps (name_filters bounds them).",
	})
	negativeMerged = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftroute", Name: "negative_merged_total",
		Help: "Answers merged from the facts of every shard, by the rcode of the merged answer.",
	}, []string{"rcode"})
	negCacheHits = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftroute", Name: "negative_cache_hits_total",
		Help: "Merged negative answers served from the negative cache.",
	})
	staleAnswers = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftroute", Name: "stale_answers_total",
		Help: "Queries answered from a member's last state because no member of the shard could confirm its state was current (no leader).",
	}, []string{"shard"})
	noticesCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftroute", Name: "notices_total",
		Help: "Change notices (NOTIFY) received from shard members, by change: records, zone put, zone deleted.",
	}, []string{"change"})
	leasesValid = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: plugin.Namespace, Subsystem: "craftroute", Name: "leases_valid",
		Help: "1 while the router holds an unexpired change lease on every member (its negative cache is on), 0 otherwise.",
	})
	updatesForwarded = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftroute", Name: "updates_total",
		Help: "UPDATE messages forwarded to a shard, by the rcode of its response.",
	}, []string{"shard", "rcode"})
	xfrCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftroute", Name: "transfers_total",
		Help: "Zone transfers (AXFR, IXFR) served through the router, by kind (zone: key mode zone; full or incremental: key mode name) and result (done, or failed: cut short).",
	}, []string{"kind", "result"})
	txOutcomes = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftroute", Name: "transactions_total",
		Help: "Changes that span shards run as transactions, by outcome: commit, abort or unknown (the decision could not be recorded).",
	}, []string{"outcome"})
	heldRetries = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftroute", Name: "held_retries_total",
		Help: "Queries asked again because a transaction in progress held their name.",
	})
	txBusy = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "craftroute", Name: "transaction_retries_total",
		Help: "Transactions tried again under a new ID: a name was locked by another one, or a participant aborted it while this router retried a member.",
	})
)

// mapUnreachable sets shard_map_unreachable.
func mapUnreachable(yes bool) {
	if yes {
		mapUnreachableGauge.Set(1)
	} else {
		mapUnreachableGauge.Set(0)
	}
}
