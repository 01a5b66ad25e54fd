package craftstore

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/craftdns/craftdns/internal/policy"
	"github.com/craftdns/craftdns/plugin/craftstore/replica"

	"github.com/miekg/dns"
)

// The health checks of request-routing policies (internal/policy,
// health.go). The group's leader alone probes the values of its zones'
// policies and commits what it finds as health records, in RFC 2136
// UPDATEs through Raft: every member answers by the same state, and a new
// leader starts from the state its group committed. Probes run in their
// own goroutines, never on a query's path; one value probed the same way
// for several policies is probed once.

const (
	// checkTick is how often the checker looks for probes due, results
	// and the leadership.
	checkTick = 100 * time.Millisecond
	// checkScan bounds how often the checker reads the zones' policies
	// again, when a zone's serial moved.
	checkScan = time.Second
	// maxProbes bounds the probes in flight.
	maxProbes = 64
)

// probeState is the leader's state of one probe.
type probeState struct {
	up       bool
	run      int // successes (up: failures) in a row against the state
	next     time.Time
	inFlight bool
	seen     bool // named by a policy at the last scan
}

// policyUse is one (zone, name, type) whose policy names probes, by value.
type policyUse struct {
	zone, name string
	t          uint16
	probes     map[string]policy.Probe
}

// checker is the health checker of one member.
type checker struct {
	rep     *replica.Replica
	member  string
	states  map[policy.Probe]*probeState
	uses    []policyUse
	serials map[string]uint32 // zone → serial at the last scan
	scanned time.Time
	results chan probeResult
	sem     chan struct{}
	client  *http.Client
	// dirty: the health records may differ from the states (a state
	// changed, a scan found policies, a write failed).
	dirty bool
	// read holds the probes of the policy records the last scan read: a
	// scan reads (JSON) only the records written since.
	read map[dns.RR]readProbes
}

type readProbes struct {
	probes map[string]policy.Probe
	t      uint16
}

type probeResult struct {
	p  policy.Probe
	ok bool
}

// checkPolicies runs the member's health checker until stop is closed.
func (m *member) checkPolicies(id uint64) {
	ck := &checker{rep: m.rep, member: strconv.FormatUint(id, 10), results: make(chan probeResult, maxProbes), sem: make(chan struct{}, maxProbes),
		client: &http.Client{
			Transport:     &http.Transport{DisableKeepAlives: true, Proxy: nil, MaxResponseHeaderBytes: 16 << 10},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}}
	t := time.NewTicker(checkTick)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case r := <-ck.results:
			ck.result(r)
		case now := <-t.C:
			ck.round(now)
		}
	}
}

// round does what is due at now: forget everything when not the leader;
// else scan, start probes, commit changed states.
func (ck *checker) round(now time.Time) {
	if !ck.rep.IsLeader() || !ck.rep.Ready() {
		if ck.states != nil {
			for p := range ck.states {
				probeGauge.DeleteLabelValues(ck.member, p.String())
			}
			ck.states, ck.uses, ck.serials, ck.read = nil, nil, nil, nil
		}
		return
	}
	if ck.states == nil || (now.Sub(ck.scanned) >= checkScan && ck.moved()) {
		ck.scan(now)
	}
	for p, st := range ck.states {
		if st.inFlight || now.Before(st.next) {
			continue
		}
		select {
		case ck.sem <- struct{}{}:
		default:
			continue // at the bound: next round
		}
		st.inFlight = true
		st.next = now.Add(p.Interval)
		go func(p policy.Probe) {
			defer func() { <-ck.sem }()
			ck.results <- probeResult{p, ck.probe(p)}
		}(p)
	}
	ck.commit()
}

// moved reports whether a zone's serial changed since the last scan (a
// policy may have come, gone or changed).
func (ck *checker) moved() bool {
	zones := ck.rep.Zones()
	if len(zones) != len(ck.serials) {
		return true
	}
	for _, origin := range zones {
		z := ck.rep.Zone(origin)
		if z == nil {
			return true
		}
		if s, _, _ := z.Serial(); s != ck.serials[origin] {
			return true
		}
	}
	return false
}

// scan reads the policies of every zone: the probes they name, each with
// the state its group committed for a probe seen for the first time.
func (ck *checker) scan(now time.Time) {
	if ck.states == nil {
		ck.states = map[policy.Probe]*probeState{}
	}
	ck.uses, ck.serials, ck.scanned = nil, map[string]uint32{}, now
	for _, st := range ck.states {
		st.seen = false
	}
	read := map[dns.RR]readProbes{}
	for _, origin := range ck.rep.Zones() {
		z := ck.rep.Zone(origin)
		if z == nil {
			continue
		}
		ck.serials[origin], _, _ = z.Serial()
		z.Policies(func(name string, rrs []dns.RR) bool {
			for _, rr := range rrs {
				if rr.Header().Rrtype != policy.TypePolicy {
					continue
				}
				rp, ok := ck.read[rr]
				if !ok {
					rp.probes, rp.t = policy.Probes(rr)
				}
				read[rr] = rp
				probes, t := rp.probes, rp.t
				if len(probes) == 0 {
					continue
				}
				ck.uses = append(ck.uses, policyUse{zone: origin, name: name, t: t, probes: probes})
				var down []string
				if h := policy.FindHealth(rrs, t); h != nil {
					down, _, _ = policy.Down(h)
				}
				for v, p := range probes {
					st := ck.states[p]
					if st == nil {
						st = &probeState{up: !slices.Contains(down, v), next: now}
						ck.states[p] = st
						probeGauge.WithLabelValues(ck.member, p.String()).Set(boolGauge(st.up))
					}
					st.seen = true
				}
			}
			return true
		})
	}
	for p, st := range ck.states {
		if !st.seen {
			delete(ck.states, p)
			probeGauge.DeleteLabelValues(ck.member, p.String())
		}
	}
	ck.read, ck.dirty = read, true
}

// probe runs p once: a TCP connection, or an HTTP GET answered below 400.
func (ck *checker) probe(p policy.Probe) bool {
	ctx, cancel := context.WithTimeout(context.Background(), p.Timeout)
	defer cancel()
	if p.Protocol == "tcp" {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", p.Addr.String())
		if err != nil {
			return false
		}
		c.Close()
		return true
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.Addr.String()+p.Path, nil)
	if err != nil {
		return false
	}
	if p.Host != "" {
		req.Host = p.Host
	}
	req.Header.Set("User-Agent", "craftdns-health-check")
	resp, err := ck.client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close() // unread: the status is the answer
	return resp.StatusCode < 400
}

// result counts one probe's outcome; Rise successes (Fall failures) in a
// row against the state change it.
func (ck *checker) result(r probeResult) {
	outcome := "ok"
	if !r.ok {
		outcome = "failed"
	}
	checkCount.WithLabelValues(ck.member, outcome).Inc()
	st := ck.states[r.p]
	if st == nil {
		return // no longer named, or the leadership went
	}
	st.inFlight = false
	if r.ok == st.up {
		st.run = 0
		return
	}
	st.run++
	need := r.p.Fall
	if !st.up {
		need = r.p.Rise
	}
	if st.run >= need {
		st.up, st.run, ck.dirty = r.ok, 0, true
		probeGauge.WithLabelValues(ck.member, r.p.String()).Set(boolGauge(st.up))
		log.Infof("health check %s: %s", r.p, map[bool]string{true: "up", false: "down"}[st.up])
	}
}

// commit writes, zone by zone, the health records whose values changed
// state; a write that fails is tried again next round.
func (ck *checker) commit() {
	if !ck.dirty {
		return
	}
	byZone := map[string][]dns.RR{}
	for _, u := range ck.uses {
		z := ck.rep.Zone(u.zone)
		if z == nil {
			continue
		}
		var down []string
		for v, p := range u.probes {
			if st := ck.states[p]; st != nil && !st.up {
				down = append(down, v)
			}
		}
		slices.Sort(down)
		old := policy.FindHealth(z.RRs(u.name, policy.TypeHealth), u.t)
		var had []string
		if old != nil {
			had, _, _ = policy.Down(old)
		}
		if slices.Equal(had, down) {
			continue
		}
		byZone[u.zone] = append(byZone[u.zone], policy.SetHealth(u.name, u.t, old, down)...)
	}
	failed := false
	for origin, updates := range byZone {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rcode, _, err := ck.rep.Update(ctx, origin, nil, updates)
		cancel()
		if err == nil && rcode != dns.RcodeSuccess {
			err = errors.New(dns.RcodeToString[rcode])
		}
		if err != nil {
			failed = true
			log.Warningf("committing health states of %s: %v; trying again", origin, err)
			continue
		}
		healthChanges.WithLabelValues(ck.member).Add(float64(len(updates)))
	}
	ck.dirty = failed
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
