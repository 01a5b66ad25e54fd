package craftroute

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/craftdns/craftdns/internal/ede"
	"github.com/craftdns/craftdns/internal/shardmap"
	"github.com/craftdns/craftdns/internal/shardproto"
	"github.com/craftdns/craftdns/internal/txn"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// Shard is one craftstore Raft group: its members, each with its DNS
// address and, optionally, its HTTP API base URL.
type Shard struct {
	Name    string
	Members []*Member
	// minIndex is the highest applied index of a member of the shard the
	// router was told of (shardproto/index.go): its routed queries ask for
	// a state that has applied it.
	minIndex atomic.Uint64
	// next is the Shard that replaced this one in a new routing (a map
	// change of its members, shardmap.go's adopt): what this one is told
	// afterwards is passed on, so that the router's reads never go back.
	next atomic.Pointer[Shard]
	// duration is the shard's request_duration_seconds, made on first use.
	duration atomic.Value // prometheus.Observer
	// lastSerial is the serial option of the last relayed answer whose
	// serial the router observed (fast.go's learnWire).
	lastSerial atomic.Pointer[[]byte]
}

// observeDuration records the time of one query to the shard.
func (s *Shard) observeDuration(d time.Duration) {
	o, ok := s.duration.Load().(prometheus.Observer)
	if !ok {
		o = requestDuration.WithLabelValues(s.Name)
		s.duration.Store(o)
	}
	o.Observe(d.Seconds())
}

// APIs returns the API base URLs of the shard's members, in the order of
// its members ("shard_api"); nil when it has none.
func (s *Shard) APIs() []string {
	var urls []string
	for _, m := range s.Members {
		if m.API != "" {
			urls = append(urls, m.API)
		}
	}
	return urls
}

// Member is one craftstore member as the router sees it.
//
// Its liveness is one time, the last time it was known alive: a success sets
// it to now, a failure sets it into the future (now + down-for). While that
// time is after now the member is down: it is tried only after the live
// members of its shard.
type Member struct {
	Shard string
	Addr  string // DNS address, host:port, or tls://host:port when asked over TLS
	API   string // base URL of its HTTP API (shard_api); "" when the router has none

	dial    string      // Addr's host:port
	tls     *tls.Config // when asked over TLS; nil: plain DNS
	udp     *udpMux     // connected UDP sockets, read in batches (udpmux.go); nil over TLS
	tcp     *tcpMux     // persistent TCP (or TLS) connections, pipelined (tcpmux.go)
	timeout time.Duration

	alive  atomic.Int64 // unix nanoseconds: last known alive, or the end of a down period
	marked atomic.Bool  // the member_down gauge says 1
	mu     sync.Mutex   // orders the updates of marked and the gauge

	down     prometheus.Gauge
	requests [16]atomic.Value // prometheus.Counter of requests_total by rcode, made on first use
	stopOnce sync.Once
}

// newMember returns the member at addr (host:port, or tls://host:port) of
// shard; one try at it waits at most timeout for a response. A member at a
// tls:// address is asked every query over TLS with tc (the system's CAs
// when nil). Its sockets are opened on first use.
func newMember(shard, addr string, timeout time.Duration, tc *tls.Config) *Member {
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	m := &Member{
		Shard:   shard,
		Addr:    addr,
		timeout: timeout,
		down:    memberDown.WithLabelValues(shard, addr),
	}
	var overTLS bool
	m.dial, overTLS = shardmap.SplitAddr(addr)
	if overTLS {
		if tc == nil {
			tc = defaultTLS()
		}
		m.tls = tc
	} else {
		m.udp = newUDPMux(m.dial)
	}
	m.tcp = newTCPMux(m.dial, m.tls)
	return m
}

// defaultTLS is the configuration of a router without a tls property:
// the system's CAs, no client certificate.
func defaultTLS() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, ClientSessionCache: tls.NewLRUClientSessionCache(0)}
}

// start makes the member's gauge say it is up.
func (m *Member) start() { m.down.Set(0) }

// stop closes the member's connections. The member must not be used after.
func (m *Member) stop() {
	m.stopOnce.Do(func() {
		if m.udp != nil {
			m.udp.close()
		}
		m.tcp.close()
	})
}

// Exchange sends req to one member: UDP, TCP again when the answer is truncated.
//
// req is not modified (a copy is packed, see ownOPT), so one
// request may be sent to several members at once. The response has req's Id. One
// try waits at most the member's timeout; when ctx has an earlier deadline,
// Exchange returns ctx.Err() at that deadline. A cancellation of ctx without
// a deadline is seen between tries.
func (m *Member) Exchange(ctx context.Context, req *dns.Msg) (*dns.Msg, error) {
	resp, err := m.exchange(ctx, req)
	if err == nil {
		m.count(resp.Rcode)
	}
	return resp, err
}

// exchange is Exchange without the requests_total metric (probes count
// apart): UDP through the member's connected sockets (udpmux.go), TCP
// through its persistent connections (tcpmux.go) for an answer too long
// for UDP.
func (m *Member) exchange(ctx context.Context, req *dns.Msg) (*dns.Msg, error) {
	r := new(dns.Msg)
	*r = *req // the sockets set a random Id
	r.Extra = ownOPT(req.Extra)
	if m.udp == nil {
		return m.try(ctx, r, true) // over TLS
	}
	resp, err := m.try(ctx, r, false)
	if errors.Is(err, errMuxTooLong) || (err == nil && resp.Truncated) {
		return m.try(ctx, r, true)
	}
	return resp, err
}

// errMismatch is an answer to another question than the one asked.
var errMismatch = errors.New("member answered another question")

// try is one try of r over the member's UDP sockets or over TCP, waiting
// at most the member's timeout, or until ctx's deadline when that is
// sooner (ctx.Err() then). The answer has r's Id. r is not modified.
func (m *Member) try(ctx context.Context, r *dns.Msg, tcp bool) (*dns.Msg, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	timeout, cut := m.timeout, false
	if d, ok := ctx.Deadline(); ok {
		if left := time.Until(d); left < timeout {
			if left <= 0 {
				return nil, context.DeadlineExceeded
			}
			timeout, cut = left, true
		}
	}
	wt := waiters.Get().(*waiter)
	defer waiters.Put(wt)
	id := r.Id
	q, err := r.PackBuffer(wt.q[:])
	if err != nil {
		return nil, err
	}
	var ans []byte
	if tcp {
		ans, err = m.tcp.exchange(q, wt, timeout)
	} else {
		var n int
		if n, err = m.udp.exchange(q, wt, timeout); err == nil {
			ans = wt.buf[:n]
		}
	}
	if err != nil {
		if errors.Is(err, errMuxTimeout) && cut {
			// ctx's own timer ends it at the same moment: its error, so
			// that the caller does not blame the member.
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return nil, err
	}
	if !tcp && len(ans) > udpSize(r) {
		// More than the query allows over UDP (RFC 6891 §6.2.5): asked
		// again over TCP, as a reader with a buffer of that size would.
		return nil, errMuxTooLong
	}
	resp := new(dns.Msg)
	if err := resp.Unpack(ans); err != nil {
		return nil, err
	}
	if len(resp.Question) != 1 || len(r.Question) != 1 || !resp.Response ||
		!strings.EqualFold(resp.Question[0].Name, r.Question[0].Name) ||
		resp.Question[0].Qtype != r.Question[0].Qtype || resp.Question[0].Qclass != r.Question[0].Qclass {
		return nil, errMismatch
	}
	resp.Id = id
	return resp, nil
}

// ownOPT returns extra with its OPT record copied: Msg.Pack writes the
// extended rcode into the OPT record, so concurrent exchanges of one request
// must not share it. The other records are only read.
func ownOPT(extra []dns.RR) []dns.RR {
	for i, rr := range extra {
		if opt, ok := rr.(*dns.OPT); ok {
			out := slices.Clone(extra)
			out[i] = dns.Copy(opt)
			return out
		}
	}
	return extra
}

// count counts an answer in requests_total.
func (m *Member) count(rcode int) {
	if rcode < 0 || rcode >= len(m.requests) {
		requestCount.WithLabelValues(m.Shard, m.Addr, rcodeString(rcode)).Inc()
		return
	}
	c, ok := m.requests[rcode].Load().(prometheus.Counter)
	if !ok {
		c = requestCount.WithLabelValues(m.Shard, m.Addr, rcodeString(rcode))
		m.requests[rcode].Store(c)
	}
	c.Inc()
}

func rcodeString(rcode int) string {
	if s, ok := dns.RcodeToString[rcode]; ok {
		return s
	}
	return strconv.Itoa(rcode)
}

// Succeeded records that the member answered at now: it is alive.
func (m *Member) Succeeded(now time.Time) {
	n := now.UnixNano()
	if old := m.alive.Swap(n); old <= n && !m.marked.Load() {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.alive.Load() <= n { // not failed again meanwhile
		m.marked.Store(false)
		m.down.Set(0)
	}
}

// Failed records that the member failed at now: it is down until now+downFor
// (or later, when it already was). A downFor of 0 does not mark it down.
func (m *Member) Failed(now time.Time, downFor time.Duration) {
	until := now.Add(downFor).UnixNano()
	m.mu.Lock()
	defer m.mu.Unlock()
	if until > m.alive.Load() {
		m.alive.Store(until)
	}
	if downFor > 0 {
		m.marked.Store(true)
		m.down.Set(1)
	}
}

// Down reports whether the member is down at now.
func (m *Member) Down(now time.Time) bool { return m.alive.Load() > now.UnixNano() }

// Alive reports whether the member answered once and is not down at now.
func (m *Member) Alive(now time.Time) bool {
	a := m.alive.Load()
	return a != 0 && a <= now.UnixNano()
}

// Order puts the shard's members into dst (overwriting it; it allocates
// only when dst has too little capacity) and returns it: the members that
// are not down at now first, in a random order that differs per call so
// that no member gets all the traffic, then the down members, the soonest
// back first.
func (s *Shard) Order(now time.Time, dst []*Member) []*Member {
	dst = append(dst[:0], s.Members...)
	n := now.UnixNano()
	live := 0
	for i, m := range dst {
		if m.alive.Load() <= n {
			dst[i], dst[live] = dst[live], dst[i]
			live++
		}
	}
	for i := live - 1; i > 0; i-- {
		j := rand.IntN(i + 1)
		dst[i], dst[j] = dst[j], dst[i]
	}
	// Insertion sort of the few down members by the end of their down period.
	for i := live + 1; i < len(dst); i++ {
		for j := i; j > live && dst[j].alive.Load() < dst[j-1].alive.Load(); j-- {
			dst[j], dst[j-1] = dst[j-1], dst[j]
		}
	}
	return dst
}

// failover is the router's one failover loop, over the members of s in
// order of liveness (Order; dst is the buffer for it): it calls try with
// each until try returns true (done), and returns the order, for a second
// pass (tryEach), and ctx's error when ctx ended the loop. try knows what
// a failure is in its protocol and marks the member (Failed, Succeeded)
// itself; i is the member's place in the order (0: the first choice).
func (s *Shard) failover(ctx context.Context, dst []*Member, try func(i int, m *Member) (done bool)) ([]*Member, error) {
	order := s.Order(time.Now(), dst)
	return order, tryEach(ctx, order, try)
}

// tryEach calls try with each member of order until try returns true, and
// returns ctx's error when ctx ended before one did (it is checked before
// each try).
func tryEach(ctx context.Context, order []*Member, try func(i int, m *Member) (done bool)) error {
	for i, m := range order {
		if err := ctx.Err(); err != nil {
			return err
		}
		if try(i, m) {
			return nil
		}
	}
	return nil
}

// Exchange sends req to the shard's members in order of liveness until one answers.
// When every member answered that it could not confirm its state is current
// (SERVFAIL with the Extended DNS Error Not Ready), the members are asked
// again allowing a stale answer.
//
// An error, a timeout or a SERVFAIL marks the member failed (down for
// downFor) and the next member is tried; an answer marks it alive and is
// returned with the member. When no member answers without SERVFAIL, the
// last SERVFAIL is returned if there was one, else the last error. The
// whole exchange ends at ctx's deadline; a member cut short by it is not
// marked failed.
func (s *Shard) Exchange(ctx context.Context, req *dns.Msg, downFor time.Duration) (*dns.Msg, *Member, error) {
	var (
		buf      [8]*Member
		servfail *dns.Msg
		heldResp *dns.Msg
		heldFrom *Member
		resp     *dns.Msg
		from     *Member
		err      error
	)
	order, cerr := s.failover(ctx, buf[:0], func(i int, m *Member) bool {
		if i > 0 {
			failoverCount.WithLabelValues(s.Name).Inc()
		}
		r, e := m.Exchange(ctx, req)
		now := time.Now()
		switch {
		case e != nil:
			err = fmt.Errorf("shard %q member %s: %w", s.Name, m.Addr, e)
			if ctx.Err() == nil {
				m.Failed(now, downFor)
			}
			return false
		case r.Rcode == dns.RcodeServerFailure && held(r):
			// Alive, but it could not resolve a transaction that holds
			// the name: its coordinator's group could not say, or the
			// member could not apply the decision (a full disk, a member
			// behind). Another member may; when none does, the caller
			// asks again (Craftroute.exchange).
			m.Succeeded(now)
			heldResp, heldFrom = r, m
			return false
		case r.Rcode == dns.RcodeServerFailure:
			m.Failed(now, downFor)
			servfail, from = r, m
			return false
		default:
			m.Succeeded(now)
		}
		resp, from = r, m
		return true
	})
	if resp != nil {
		return resp, from, nil
	}
	if heldResp != nil {
		return heldResp, heldFrom, nil
	}
	if servfail != nil && ctx.Err() == nil && notCurrent(servfail) && shardproto.Routed(req) && !shardproto.StaleAllowed(req) {
		// No member could confirm its state is current: the shard has no
		// leader (an election, a lost quorum) or none is reachable. A
		// stale answer beats none (RFC 8767): ask again, allowing each
		// member its last state; such answers carry the Extended DNS Error
		// Stale Answer.
		stale := shardproto.AllowStale(req)
		tryEach(ctx, order, func(_ int, m *Member) bool {
			if r, e := m.Exchange(ctx, stale); e == nil && r.Rcode != dns.RcodeServerFailure {
				resp, from = r, m
				return true
			}
			return false
		})
		if resp != nil {
			staleAnswers.WithLabelValues(s.Name).Inc()
			return resp, from, nil
		}
	}
	if servfail != nil {
		return servfail, from, nil
	}
	if err == nil && cerr != nil {
		err = fmt.Errorf("shard %q: %w", s.Name, cerr)
	}
	if err == nil {
		err = fmt.Errorf("shard %q has no members", s.Name)
	}
	return nil, nil, err
}

// held reports whether SERVFAIL m says a transaction in progress holds the
// name (txn.HeldText): the member is alive, the query may be asked again.
func held(m *dns.Msg) bool {
	e := ede.Of(m)
	return e != nil && e.InfoCode == dns.ExtendedErrorCodeNotReady && e.ExtraText == txn.HeldText
}

// notCurrent reports whether SERVFAIL m says the member could not answer
// from a current state (Extended DNS Error Not Ready).
func notCurrent(m *dns.Msg) bool {
	e := ede.Of(m)
	return e != nil && e.InfoCode == dns.ExtendedErrorCodeNotReady
}

// raise lifts the shard's minIndex to index when it is higher.
func (s *Shard) raise(index uint64) {
	for {
		cur := s.minIndex.Load()
		if index <= cur || s.minIndex.CompareAndSwap(cur, index) {
			break
		}
	}
	if n := s.next.Load(); n != nil {
		n.raise(index)
	}
}
