package craftroute

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/ede"
	"github.com/craftdns/craftdns/internal/policy"
	"github.com/craftdns/craftdns/internal/shardproto"
	"github.com/craftdns/craftdns/internal/txn"

	"github.com/miekg/dns"
)

// maxChain bounds the CNAME steps of one answer, as craftstore's lookup
// does. Loops end earlier, on the first repeated (CNAME RRset, owner) pair.
const maxChain = 64

// errNoShard is returned when no member of a shard answered.
type errNoShard struct {
	shard string
	err   error
}

func (e *errNoShard) Error() string {
	return fmt.Sprintf("no member of shard %s answered: %v", e.shard, e.err)
}

func (e *errNoShard) Unwrap() error { return e.err }

// resolve answers a single-question query. A member that fences the
// router's map (fence.go) makes it read the map and resolve again, once.
// pre, when not nil, is the owner's answer the fast path got (fast.go):
// the first resolution starts from it.
func (c *Craftroute) resolve(ctx context.Context, r *dns.Msg, pre *prefetch) (*dns.Msg, error) {
	rt := c.routes()
	if pre != nil {
		rt = pre.rt
	}
	resp, err := c.resolveOnce(ctx, r, rt, pre)
	for try := 0; try < fenceRetries && err != nil && c.refreshMap(ctx, err); try++ {
		resp, err = c.resolveOnce(ctx, r, c.routes(), nil)
	}
	return resp, err
}

// resolveOnce answers a single-question query by routing rt, the one the
// router used when the resolution began: its queries say rt's epoch, never
// a newer one than the names were placed by. pre, when not nil, holds the
// owner's answer to r's question, asked by rt.
func (c *Craftroute) resolveOnce(ctx context.Context, r *dns.Msg, rt *routing, pre *prefetch) (*dns.Msg, error) {
	q := r.Question[0]
	if q.Qtype == dns.TypeAXFR || q.Qtype == dns.TypeIXFR {
		// The transfer plugin, when configured, runs before us and serves
		// these (xfr.go).
		return ede.Reply(r, dns.RcodeRefused, dns.ExtendedErrorCodeProhibited, "zone transfer not allowed"), nil
	}
	if rt.key == keyZone {
		// The whole zone is on one shard: its answer is final as it is.
		s := rt.shard(rt.ring.Locate(c.keyOf(rt.key, dnsname.Lower(q.Name))))
		var resp *dns.Msg
		if pre != nil && pre.resp != nil {
			resp = pre.resp
		} else {
			req := forward(r)
			rt.markEpoch(req, true)
			var err error
			if resp, err = c.exchange(ctx, s, req, true); err != nil {
				return nil, &errNoShard{s.Name, err}
			}
		}
		resp.Id, resp.Question = r.Id, r.Question
		shardproto.Strip(resp)
		if r.IsEdns0() == nil {
			resp.Extra = withoutOPT(resp.Extra)
		}
		return resp, nil
	}
	opt := r.IsEdns0()
	edns, do := opt != nil, opt != nil && opt.Do()
	// The negative cache is used only while every member would notify this
	// router of a write before acknowledging it (lease.go).
	began := time.Now()
	cacheOn := c.leases.valid(began)
	neg := c.neg
	if c.sec != nil && signing(ctx) != nil {
		neg = c.negSigned // completed for signing (dnssec.go)
	}
	start := c.changes.begin()
	if pre != nil {
		// The fast path looked in the cache before it asked the owner.
		began, cacheOn, start = pre.began, pre.cacheOn, pre.start
	} else if cacheOn {
		if m := neg.get(q.Name, q.Qtype, edns, do, c.changes.valid); m != nil {
			negCacheHits.Inc()
			m.Id, m.Question = r.Id, r.Question
			c.present(ctx, r, m, began)
			return m, nil
		}
	}
	mk := marks{rt: rt}
	if pre != nil && pre.resp != nil {
		mk.first = pre.resp
		mk.note(pre.resp)
	}
	ctx = context.WithValue(ctx, marksKey{}, &mk)
	resp, broadcast, err := c.resolveName(ctx, r)
	if err != nil {
		return nil, err
	}
	c.present(ctx, r, resp, began)
	if mk.stale.Load() {
		// Not cached: a write acknowledged before the shard lost its
		// leader may be missing from it.
		if e := ede.Of(resp); e == nil || e.InfoCode != dns.ExtendedErrorCodeStaleAnswer { // not kept from a member's answer
			ede.Add(resp, dns.ExtendedErrorCodeStaleAnswer, "a shard could not confirm its state is current (no leader): answered from a member's last state")
		}
		return resp, nil
	}
	if broadcast {
		if kind := negativeKind(resp); kind != "" {
			negativeMerged.WithLabelValues(kind).Inc()
			// An answer read past an undecided transaction is right now,
			// but its commit may come at any moment: not cached.
			if cacheOn && !mk.held.Load() {
				neg.put(q.Name, q.Qtype, edns, do, resp, start)
			}
		}
	}
	return resp, nil
}

// negativeKind names a negative answer: "NXDOMAIN", "NODATA" or "".
func negativeKind(m *dns.Msg) string {
	switch {
	case m.Rcode == dns.RcodeNameError:
		return "NXDOMAIN"
	case m.Rcode == dns.RcodeSuccess && len(m.Answer) == 0 && m.Authoritative:
		for _, rr := range m.Ns {
			if rr.Header().Rrtype == dns.TypeSOA {
				return "NODATA"
			}
		}
	}
	return ""
}

// exchange sends req, which it may change, to shard s, the owner of req's
// name by the router's map or one of every shard asked (fence.go): the
// test exchanger when set, else the shard's members in order of liveness. A stale answer (no member could
// confirm its state, Shard.Exchange) and one read past an undecided
// transaction (shardproto.Held) are recorded in ctx's marks.
func (c *Craftroute) exchange(ctx context.Context, s *Shard, req *dns.Msg, owner bool) (*dns.Msg, error) {
	var (
		resp *dns.Msg
		err  error
	)
	if c.leases.valid(time.Now()) {
		// Every write acknowledged so far was notified with its index: a
		// member that applied the highest needs no round to its leader.
		// req is built for this exchange (query, forward), so its option
		// may change in place.
		shardproto.SetMinIndex(req, s.minIndex.Load())
	}
	// A name held by a transaction in progress: the member waited
	// txn.RoutedWait for its outcome; ask again, for at most heldFor.
	var deadline time.Time
	start := time.Now()
	defer func() { s.observeDuration(time.Since(start)) }()
	mk, _ := ctx.Value(marksKey{}).(*marks)
	c.markEpoch(ctx, mk, req, owner)
	var st *signState
	if c.sec != nil {
		st = signing(ctx)
	}
	if st != nil {
		shardproto.RequestSigned(req) // the router signs the answer (dnssec.go)
	}
	for {
		if c.ex != nil {
			resp, err = c.ex.exchange(ctx, s, req)
		} else {
			resp, _, err = s.Exchange(ctx, req, c.cfg.downFor)
		}
		if err == nil {
			if ferr := c.checkEpoch(s, resp); ferr != nil {
				noteFenced(ctx, ferr)
				return nil, ferr
			}
		}
		if err != nil || resp.Rcode != dns.RcodeServerFailure || !held(resp) || ctx.Err() != nil {
			break
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(heldFor)
		} else if time.Now().After(deadline) {
			break
		}
		heldRetries.Inc()
	}
	if err == nil {
		c.learn(s, resp)
		mk.note(resp)
		if st != nil {
			st.note(resp)
		}
	}
	return resp, err
}

// learn keeps what the router keeps of shard s's answer resp, a higher
// index and a serial, when the member signed them (shardproto/auth.go).
func (c *Craftroute) learn(s *Shard, resp *dns.Msg) {
	idx, raise := shardproto.IndexOf(resp)
	raise = raise && idx > s.minIndex.Load()
	zone, serial, base, observe := shardproto.SerialOf(resp)
	if (raise || observe) && shardproto.AnswerSigned(resp, c.leases.key) {
		if raise {
			s.raise(idx) // this router's reads never go back
		}
		if observe {
			c.soa.observe(dnsname.Lower(zone), s.Name, serial, base, time.Now())
		}
	}
}

// note records in the resolution's marks (mk may be nil) what answer resp
// says of the state it was read from.
func (mk *marks) note(resp *dns.Msg) {
	if mk == nil {
		return
	}
	if shardproto.Held(resp) {
		mk.held.Store(true)
	}
	if e := ede.Of(resp); e != nil && e.InfoCode == dns.ExtendedErrorCodeStaleAnswer {
		mk.stale.Store(true)
	}
}

// heldFor bounds how long a query waits for a transaction that holds its
// name (asking again while members answer txn.HeldText): a part left
// prepared is finished by its shard after txn.ResolveAfter.
const heldFor = 2 * txn.ResolveAfter

// marks are what a resolution learns from the answers it used (shards are
// asked concurrently): none of its answers is cached when one is set.
type marks struct {
	// stale: an answer came from a member's unconfirmed state; the
	// resolution's answer says so with the Extended DNS Error Stale Answer.
	stale atomic.Bool
	// held: an answer was read past a transaction whose outcome was not
	// decided yet (shardproto.Held).
	held atomic.Bool
	// rt is the routing the resolution started with: its queries say its
	// epoch (fence.go).
	rt *routing
	// first is the owner's answer for the query's own name that the fast
	// path got (fast.go): the first step takes it instead of asking.
	first *dns.Msg
}

// resolving returns the routing the resolution of ctx started with (its
// marks), else the one the router uses now: a resolution asks the shards
// its queries' epoch places names on.
func (c *Craftroute) resolving(ctx context.Context) *routing {
	if mk, _ := ctx.Value(marksKey{}).(*marks); mk != nil && mk.rt != nil {
		return mk.rt
	}
	return c.routes()
}

// ownerIn returns the shard rt places name on.
func (c *Craftroute) ownerIn(rt *routing, name string) *Shard {
	return rt.shard(rt.ring.Locate(c.keyOf(rt.key, dnsname.Lower(name))))
}

// marksKey is the context key of a resolution's *marks.
type marksKey struct{}

// exchanger sends a query to a shard; (*Shard).Exchange in production, an
// in-memory shard in tests.
type exchanger interface {
	exchange(ctx context.Context, s *Shard, req *dns.Msg) (*dns.Msg, error)
}

// step is the answer for one name of a lookup: the query name or a CNAME
// target.
type step struct {
	resp  *dns.Msg
	facts shardproto.Facts
	// broadcast is set when every shard was asked.
	broadcast bool
}

// resolveName answers one question in key mode "name": the partition-mode
// answer of the owner shard, merged with every other shard's when the owner
// does not hold the name, and CNAME targets followed across shards (RFC 1034
// §4.3.2 step 3a) as one unsharded server would follow them. r is the
// client's single-question query; it is not modified. The response has r's
// Id and question.
func (c *Craftroute) resolveName(ctx context.Context, r *dns.Msg) (*dns.Msg, bool, error) {
	q := r.Question[0]
	first, err := c.step(ctx, r, q.Name, q.Qtype)
	if err != nil {
		return nil, false, err
	}
	out := first.resp
	out.Id = r.Id
	out.Question = r.Question
	broadcast := first.broadcast

	origin := first.facts.Origin
	name, cur := dnsname.Lower(q.Name), first
	var seen []visit
	answer := out.Answer
	extraSet := false // out.Extra is no longer the first answer's
	opt := first.resp.IsEdns0()
	// A policy's answer anywhere in the chain carries its ECS scope: the
	// answer's is the longest (RFC 7871 section 7.3.1, the narrowest).
	scope, scoped := answerScope(first.resp)
	for n := 0; ; n++ {
		target, source, ok := cnameTarget(cur.resp, name, q.Qtype)
		if !ok {
			break
		}
		// craftstore's loop rule: a CNAME RRset is not added twice for the
		// same owner; a wildcard synthesizing for the query name counts as
		// an owner distinct from the same name reached later.
		if cur.facts.Kind == shardproto.Absent && cur.facts.Wildcard {
			source = "*." + suffix(name, int(cur.facts.Labels))
		}
		key := name
		if n == 0 && cur.facts.Kind == shardproto.Absent {
			key = ""
		}
		if hasVisit(seen, source, key) {
			// The CNAME just answered repeats one: drop it, end without authority.
			answer = answer[:len(answer)-len(cnameRRs(cur.resp, name))]
			out.Ns, out.Extra, extraSet = nil, nil, true
			break
		}
		seen = append(seen, visit{source, key})
		if n+1 >= maxChain || origin == "" || !dns.IsSubDomain(origin, dnsname.Lower(target)) {
			out.Ns, out.Extra, extraSet = nil, nil, true // a chain leaving the zone ends without authority
			break
		}
		next, err := c.step(ctx, r, target, q.Qtype)
		if err != nil {
			return nil, false, err
		}
		if s, ok := answerScope(next.resp); ok {
			scope, scoped = max(scope, s), true
		}
		broadcast = broadcast || next.broadcast
		// A DNAME applies again to a name it synthesized (its target an
		// ancestor of its owner): its RRset is in the answer once.
		answer = append(answer, withoutRepeatedDNAME(answer, next.resp.Answer)...)
		out.Rcode = next.resp.Rcode
		out.Ns, out.Extra, extraSet = next.resp.Ns, next.resp.Extra, true
		name, cur = dnsname.Lower(target), next
	}
	out.Answer = answer
	// One OPT record, the first answer's, and only for an EDNS client. The
	// first answer's own additional section, to an EDNS client, has just that.
	if extraSet || r.IsEdns0() == nil {
		out.Extra = withoutOPT(out.Extra)
		if opt != nil && r.IsEdns0() != nil {
			out.Extra = append(out.Extra, opt)
		}
	}
	if scoped {
		policy.Echo(out, policy.ECS(r), scope)
	}
	return out, broadcast, nil
}

type visit struct{ source, key string }

func hasVisit(seen []visit, source, key string) bool {
	for _, v := range seen {
		if v.source == source && v.key == key {
			return true
		}
	}
	return false
}

// cnameTarget returns the target of the CNAME that ends the answer of resp
// for name, and the CNAME's owner, when it is to be followed: the answer's
// last RR is a CNAME owned by name and the query type is not CNAME, nor ANY
// unless a DNAME synthesized the CNAME (RFC 6672: members follow those for
// ANY too, as NSD does), and no DNAME to its own subtree synthesized it.
func cnameTarget(resp *dns.Msg, name string, qtype uint16) (target, owner string, ok bool) {
	a := resp.Answer
	if qtype == dns.TypeCNAME || len(a) == 0 {
		return "", "", false
	}
	cn, ok := a[len(a)-1].(*dns.CNAME)
	if !ok || !strings.EqualFold(cn.Hdr.Name, name) {
		return "", "", false
	}
	var dn *dns.DNAME
	if len(a) >= 2 {
		dn, _ = a[len(a)-2].(*dns.DNAME)
	}
	if qtype == dns.TypeANY && dn == nil {
		return "", "", false
	}
	if dn != nil && dns.IsSubDomain(dnsname.Lower(dn.Hdr.Name), dnsname.Lower(dn.Target)) {
		// A DNAME to its own subtree: the chain ends with its first
		// CNAME, as craftstore's (and NSD's) lookup ends it.
		return "", "", false
	}
	return cn.Target, dnsname.Lower(cn.Hdr.Name), true
}

// withoutRepeatedDNAME returns next, the answer for a name a chain led to,
// less the DNAME RRset it starts with when answer holds that already.
func withoutRepeatedDNAME(answer, next []dns.RR) []dns.RR {
	if len(next) == 0 || next[0].Header().Rrtype != dns.TypeDNAME {
		return next
	}
	owner := next[0].Header().Name
	for _, rr := range answer {
		if rr.Header().Rrtype == dns.TypeDNAME && strings.EqualFold(rr.Header().Name, owner) {
			i := 0
			for i < len(next) && next[i].Header().Rrtype == dns.TypeDNAME && strings.EqualFold(next[i].Header().Name, owner) {
				i++
			}
			return next[i:]
		}
	}
	return next
}

// cnameRRs returns the CNAME RRs at the end of resp's answer owned by name.
func cnameRRs(resp *dns.Msg, name string) []dns.RR {
	a := resp.Answer
	i := len(a)
	for i > 0 && a[i-1].Header().Rrtype == dns.TypeCNAME && strings.EqualFold(a[i-1].Header().Name, name) {
		i--
	}
	return a[i:]
}

// suffix returns the last labels labels of canonical name.
func suffix(name string, labels int) string {
	idx := dns.Split(name)
	if labels <= 0 || len(idx) == 0 {
		return "."
	}
	if labels >= len(idx) {
		return name
	}
	return name[idx[len(idx)-labels]:]
}

// step answers name/qtype with the facts of every shard that may hold them:
// the owner shard first, all the others when the owner reports the name
// absent. The response's sections are those of one unsharded server for
// this name, its CNAME not followed.
func (c *Craftroute) step(ctx context.Context, r *dns.Msg, name string, qtype uint16) (*step, error) {
	rt := c.resolving(ctx)
	owner := c.ownerIn(rt, name)
	var resp *dns.Msg
	if mk, _ := ctx.Value(marksKey{}).(*marks); mk != nil && mk.first != nil {
		resp, mk.first = mk.first, nil // steps run one after the other
	} else {
		var err error
		if resp, err = c.exchange(ctx, owner, query(r, name, qtype), true); err != nil {
			return nil, &errNoShard{owner.Name, err}
		}
	}
	facts, err := shardproto.Parse(resp)
	if err != nil || facts.Kind == shardproto.Final {
		// No facts: the member does not hold the zone, or does not speak
		// partition mode; its answer is all there is.
		// (addGlue reads the member's epoch: before Strip.)
		if err == nil {
			if err := c.addGlue(ctx, r, owner, resp, facts.Origin); err != nil {
				return nil, err
			}
		}
		shardproto.Strip(resp)
		return &step{resp: resp, facts: facts}, nil
	}
	if !facts.Wildcard && c.filters.rulesOut(rt, facts.Origin, name, int(facts.Labels)) {
		// No other shard holds a name that could change this answer.
		filterSkips.Inc()
		shardproto.Strip(resp)
		return &step{resp: resp, facts: facts}, nil
	}
	broadcasts.Inc()
	return c.merge(rt, name, owner, c.fanOut(ctx, rt, r, name, qtype, owner, resp, facts))
}

// shardResult is one shard's partition-mode answer to a broadcast query.
type shardResult struct {
	resp  *dns.Msg
	facts shardproto.Facts
	err   error // errNotHere: the shard does not hold the zone
}

// fanOut asks every shard but the owner, whose answer (resp, facts) is
// known, for name/qtype at once, and returns the answers in shard order.
func (c *Craftroute) fanOut(ctx context.Context, rt *routing, r *dns.Msg, name string, qtype uint16, owner *Shard, resp *dns.Msg, facts shardproto.Facts) []shardResult {
	shards := rt.shards
	results := make([]shardResult, len(shards))
	done := make(chan struct{}, len(shards))
	for i, s := range shards {
		if s == owner {
			results[i] = shardResult{resp: resp, facts: facts}
			done <- struct{}{}
			continue
		}
		go func() {
			resp, err := c.exchange(ctx, s, query(r, name, qtype), false)
			res := shardResult{resp: resp, err: err}
			if err == nil {
				res.facts, res.err = shardproto.Parse(resp)
				if res.err != nil && resp.Rcode == dns.RcodeRefused {
					res.err = errNotHere // the shard does not hold the zone
				}
			}
			results[i] = res
			done <- struct{}{}
		}()
	}
	for range shards {
		<-done
	}
	return results
}

// merge makes one unsharded server's answer for name out of every shard's
// (fanOut). A name that exists anywhere (an empty non-terminal over another
// shard's names) is final; else the deepest closest encloser over all
// shards is the zone's, and only its wildcard synthesizes (RFC 4592
// §3.3.1); else the name does not exist.
func (c *Craftroute) merge(rt *routing, name string, owner *Shard, results []shardResult) (*step, error) {
	shards := rt.shards
	best := -1
	for i, res := range results {
		if errors.Is(res.err, errNotHere) {
			continue
		}
		if res.err != nil {
			return nil, &errNoShard{shards[i].Name, res.err}
		}
		switch {
		case res.facts.Kind == shardproto.Final:
			shardproto.Strip(res.resp)
			return &step{resp: res.resp, facts: res.facts, broadcast: true}, nil
		case best < 0:
			best = i
		case res.facts.Labels > results[best].facts.Labels,
			res.facts.Labels == results[best].facts.Labels && res.facts.Wildcard && !results[best].facts.Wildcard:
			best = i
		}
	}
	if best < 0 {
		best = indexOf(shards, owner)
	}
	if results[best].facts.Wildcard {
		// The wildcard's data lives on the shard owning "*.<encloser>";
		// other shards may hold it only as an empty non-terminal above
		// their names, which synthesizes NODATA.
		labels := results[best].facts.Labels
		wild := indexOf(shards, c.ownerIn(rt, "*."+suffix(dnsname.Lower(name), int(labels))))
		if w := results[wild]; w.err == nil && w.facts.Labels == labels && w.facts.Wildcard {
			best = wild
		}
		if len(results[best].resp.Answer) == 0 {
			// The map the resolution routes by may place the wildcard
			// where it no longer is (a member with a newer map answered:
			// a migration's batch moved it): a shard whose wildcard
			// synthesizes records holds its data.
			for i, res := range results {
				if res.err == nil && res.facts.Labels == labels && res.facts.Wildcard && len(res.resp.Answer) > 0 {
					best = i
					break
				}
			}
		}
	}
	// The deepest encloser's wildcard answer, or NXDOMAIN with the SOA.
	out := results[best]
	shardproto.Strip(out.resp)
	return &step{resp: out.resp, facts: out.facts, broadcast: true}, nil
}

var errNotHere = errors.New("zone not on this shard")

func indexOf(shards []*Shard, s *Shard) int {
	for i, x := range shards {
		if x == s {
			return i
		}
	}
	return 0
}

// query builds the partition-mode query for name/qtype from the client's
// query r: its flags, EDNS0 buffer size, DO bit and options travel along.
func query(r *dns.Msg, name string, qtype uint16) *dns.Msg {
	m := build(r, name, qtype)
	shardproto.Request(m)
	return m
}

// forward builds the query sent on for client query r in key mode "zone":
// r's question, flags and EDNS0 options, asking for an answer from a member
// that caught up with its group (shardproto.RequestFresh).
func forward(r *dns.Msg) *dns.Msg {
	m := build(r, r.Question[0].Name, r.Question[0].Qtype)
	shardproto.RequestFresh(m)
	return m
}

// withoutOPT returns rrs without OPT records.
func withoutOPT(rrs []dns.RR) []dns.RR {
	out := rrs[:0:0]
	for _, rr := range rrs {
		if rr.Header().Rrtype != dns.TypeOPT {
			out = append(out, rr)
		}
	}
	return out
}

func build(r *dns.Msg, name string, qtype uint16) *dns.Msg {
	m := new(dns.Msg)
	m.Id = r.Id // the member sockets send it with a fresh random ID and restore this one
	m.Opcode = dns.OpcodeQuery
	m.RecursionDesired = r.RecursionDesired
	m.CheckingDisabled = r.CheckingDisabled
	m.Question = []dns.Question{{Name: name, Qtype: qtype, Qclass: r.Question[0].Qclass}}
	if opt := r.IsEdns0(); opt != nil {
		o := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
		o.SetUDPSize(opt.UDPSize())
		o.SetDo(opt.Do())
		for _, e := range opt.Option {
			if c := e.Option(); c != shardproto.Code && c != shardproto.EpochCode && c != shardproto.SignCode && c != dns.EDNS0COOKIE {
				o.Option = append(o.Option, e)
			}
		}
		m.Extra = append(m.Extra, o)
	}
	return m
}

// addGlue completes referral resp, answered by shard answered, with the
// addresses of its name servers that are names of the zone outside every
// cut: they live on their own shard only, while one unsharded server adds
// them (RFC 1034 §4.3.2 step 3b). Names below a cut live on every shard and
// are in resp already. The additional section is rebuilt in the order of
// the NS RRset, A before AAAA, as craftstore builds it. When the member's
// map was newer than the resolution's (resp says its epoch), a name
// server's name the resolution's map places on the answering shard may
// have left it since (a migration's batch), and the referral then lacks
// its address: it is asked of that shard too, which fences the query when
// the name left (the resolution runs again, with the newer map).
func (c *Craftroute) addGlue(ctx context.Context, r *dns.Msg, answered *Shard, resp *dns.Msg, origin string) error {
	if origin == "" || resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 0 || len(resp.Ns) == 0 {
		return nil
	}
	rt := c.resolving(ctx)
	e, _, ok := shardproto.AnswerEpoch(resp)
	ahead := ok && e > rt.epoch()
	var missing []string
	for _, rr := range resp.Ns {
		if t := rr.Header().Rrtype; t == dns.TypeDS || t == dns.TypeNSEC {
			continue // a signed referral's (dnssec.go)
		}
		ns, ok := rr.(*dns.NS)
		if !ok || dnsname.Lower(ns.Hdr.Name) == origin {
			return nil // not a referral
		}
		t := dnsname.Lower(ns.Ns)
		if dns.IsSubDomain(origin, t) && (ahead || c.ownerIn(rt, t) != answered) && !hasAddr(resp.Extra, t) {
			missing = append(missing, t)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	found := map[string][]dns.RR{}
	for _, t := range missing {
		for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA} {
			s := c.ownerIn(rt, t)
			g, err := c.exchange(ctx, s, query(r, t, qtype), true)
			if err != nil {
				return &errNoShard{s.Name, err}
			}
			if g.Rcode == dns.RcodeServerFailure {
				// No member could say (a name held past heldFor, no
				// leader): a referral without the address is not the
				// zone's.
				return &errNoShard{s.Name, fmt.Errorf("%s %s: SERVFAIL", t, dns.TypeToString[qtype])}
			}
			if f, err := shardproto.Parse(g); err != nil || f.Kind != shardproto.Final || g.Rcode != dns.RcodeSuccess {
				continue // absent (wildcards do not make glue), or below another cut
			}
			for _, rr := range g.Answer {
				if rr.Header().Rrtype == qtype && strings.EqualFold(rr.Header().Name, t) {
					found[t] = append(found[t], rr)
				}
			}
		}
	}
	if len(found) == 0 {
		return nil
	}
	var extra []dns.RR
	for _, rr := range resp.Ns {
		ns, ok := rr.(*dns.NS)
		if !ok {
			continue
		}
		t := dnsname.Lower(ns.Ns)
		if rrs, ok := found[t]; ok {
			extra = append(extra, rrs...)
			continue
		}
		for _, x := range resp.Extra {
			if x.Header().Rrtype != dns.TypeOPT && strings.EqualFold(x.Header().Name, t) {
				extra = append(extra, x)
			}
		}
	}
	for _, x := range resp.Extra {
		if x.Header().Rrtype == dns.TypeOPT {
			extra = append(extra, x)
		}
	}
	resp.Extra = extra
	return nil
}

// hasAddr reports whether rrs hold an A or AAAA record owned by name.
func hasAddr(rrs []dns.RR, name string) bool {
	for _, rr := range rrs {
		if t := rr.Header().Rrtype; (t == dns.TypeA || t == dns.TypeAAAA) && strings.EqualFold(rr.Header().Name, name) {
			return true
		}
	}
	return false
}
