// Package craftstore is a CoreDNS plugin serving authoritative zones that a
// Raft group replicates: every member answers from its own applied state,
// writes go through Raft and are acknowledged once committed and applied.
package craftstore

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/pkg/fall"
	clog "github.com/coredns/coredns/plugin/pkg/log"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/dnssec"
	"github.com/craftdns/craftdns/internal/ede"
	"github.com/craftdns/craftdns/internal/policy"
	"github.com/craftdns/craftdns/internal/shardmap"
	"github.com/craftdns/craftdns/internal/shardproto"
	"github.com/craftdns/craftdns/internal/txn"
	"github.com/craftdns/craftdns/internal/xfrnotify"
	"github.com/craftdns/craftdns/plugin/craftstore/replica"
	"github.com/craftdns/craftdns/plugin/craftstore/zone"

	"github.com/miekg/dns"
)

var log = clog.NewWithPlugin("craftstore")

// txReadWait bounds how long a query waits for a transaction that holds
// its name: a little longer than a stuck part takes to be resolved.
const txReadWait = txn.ResolveAfter + time.Second

// Craftstore is the plugin handler of one server block.
type Craftstore struct {
	Next  plugin.Handler
	Zones []string // the server block's zones
	Fall  fall.F

	cfg config
	rep atomic.Pointer[replica.Replica]
	ref *member // registry entry, held between OnStartup and OnShutdown
	// leases are the member's change leases (leases.go), set with rep.
	leases atomic.Pointer[leases]
	// notify sends NOTIFY through the block's transfer plugin (notify.go).
	notify *xfrnotify.Notifier
	// held finishes the transaction parts that queries found decided
	// (heldread.go).
	held heldReads
	// sec is the member's online signing (dnssec.go), set with rep; nil
	// without dnssec.
	sec atomic.Pointer[signing]
}

// ServeDNS implements plugin.Handler.
func (c *Craftstore) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	if r.Opcode == dns.OpcodeUpdate {
		return c.serveUpdate(ctx, w, r)
	}
	if len(r.Question) != 1 {
		return plugin.NextOrFailure(c.Name(), c.Next, ctx, w, r)
	}
	q := r.Question[0]
	qname := dnsname.Lower(q.Name)
	if !c.inZones(qname) {
		return plugin.NextOrFailure(c.Name(), c.Next, ctx, w, r)
	}
	switch r.Opcode {
	case dns.OpcodeQuery:
	case dns.OpcodeNotify:
		// A member takes its zones from its group's log, not from a
		// primary (RFC 1996): it refuses a NOTIFY, as the routers do.
		return ede.Write(w, r, dns.RcodeRefused, dns.ExtendedErrorCodeProhibited, "this server is not a secondary of the zone: it takes no NOTIFY")
	default:
		return ede.Write(w, r, dns.RcodeNotImplemented, dns.ExtendedErrorCodeNotSupported, fmt.Sprintf("opcode %d is not implemented", r.Opcode))
	}
	if q.Qclass != dns.ClassINET {
		// The zones are class IN; one server refuses the names of its
		// zones in another class (chaos, before us, takes its own).
		return ede.Write(w, r, dns.RcodeRefused, dns.ExtendedErrorCodeNotSupported, "only class IN is served")
	}
	rep := c.rep.Load()
	if rep == nil {
		return dns.RcodeServerFailure, nil // not written: the server answers SERVFAIL
	}
	if shardproto.IsLeaseRequest(r) {
		// A router asks to be told of changes (leases.go). A request that
		// is not granted (not signed with the routers' key, a replay) is
		// answered as a plain query.
		if l := c.leases.Load(); l != nil {
			// The applied index covers every write acknowledged before
			// the lease.
			if m := l.grant(w.RemoteAddr(), r, rep.Applied()); m != nil {
				if p := rep.Placement(); p != nil {
					// The router reads the map when it is behind.
					shardproto.AttachEpoch(m, p.Map.Epoch, false)
				}
				w.WriteMsg(m)
				return dns.RcodeSuccess, nil
			}
		}
		r = r.Copy()
		shardproto.Strip(r)
	}
	// staleOK: craftroute found no member of the group that could confirm
	// its state and asks for the last one (shardproto.AllowStale).
	routed := shardproto.Routed(r)
	staleOK := routed && shardproto.StaleAllowed(r) && c.cfg.stale != "refuse"
	unconfirmed := false
	// pend: committed entries the member had not applied when it answered,
	// which change nothing of this answer (replica.ReadFor).
	var pend *replica.Pending
	if !rep.Ready() {
		// A member that is not ready (health.go: no leader, behind its
		// group, or failing storage) must not answer for the group when
		// craftroute asks, which then tries another member. A plain query
		// gets the member's last state unless the block says stale refuse.
		// This comes before the zone lookup: a member behind its group may
		// lack a zone the group has.
		if (routed && !staleOK) || c.cfg.stale == "refuse" {
			staleCount.WithLabelValues(c.member(), "refused").Inc()
			return ede.Write(w, r, dns.RcodeServerFailure, dns.ExtendedErrorCodeNotReady, "member is not ready: it is not in touch with its group")
		}
		staleCount.WithLabelValues(c.member(), "served").Inc()
		unconfirmed = staleOK
	} else if routed {
		// craftroute's query must see every write the group acknowledged
		// before it arrived, through whichever member or router: the
		// member confirms its state is current first (replica.ReadFor).
		// With the index of the last write the router was told of
		// (partition/index.go), having applied it is enough; without,
		// the member asks its leader. Committed entries it has not
		// applied yet that change nothing of the answer do not hold it.
		var err error
		if !staleOK {
			idx, ok := shardproto.MinIndex(r)
			pend, err = rep.ReadFor(ctx, idx, !ok, qname)
		}
		switch {
		case staleOK:
			unconfirmed = true
		case err != nil:
			freshCount.WithLabelValues(c.member(), "failed").Inc()
			return ede.Write(w, r, dns.RcodeServerFailure, dns.ExtendedErrorCodeNotReady, "member could not confirm it is current: "+err.Error())
		case pend.Past():
			freshCount.WithLabelValues(c.member(), "past").Inc()
		default:
			freshCount.WithLabelValues(c.member(), "ok").Inc()
		}
	}

	// The router's map must place the name here (shardmap.Place.Fence):
	// judged once the state is current, so that the member's map is the
	// newest its group acknowledged.
	var (
		notice uint64
		fenced *dns.Msg
		// check: the answer must not depend on what pend changes (the
		// query read past it, or was judged by the epoch it sets).
		check = pend.Past()
	)
	if routed { // only routers send an epoch
		var judged *replica.Pending
		notice, fenced, judged = c.fence(ctx, rep, r, qname, pend)
		if judged != nil {
			pend, check = judged, true
		}
	}
	if fenced != nil {
		// Written: success, or the server would answer again (as ede.Write).
		w.WriteMsg(fenced)
		return dns.RcodeSuccess, nil
	}

	z := rep.Match(qname)
	if z == nil {
		if c.Fall.Through(qname) {
			return plugin.NextOrFailure(c.Name(), c.Next, ctx, w, r)
		}
		return ede.Write(w, r, dns.RcodeRefused, dns.ExtendedErrorCodeNotAuthoritative, "no such zone here")
	}
	if q.Qtype == dns.TypeAXFR || q.Qtype == dns.TypeIXFR {
		// The transfer plugin, when configured, runs before us and serves these.
		return ede.Write(w, r, dns.RcodeRefused, dns.ExtendedErrorCodeProhibited, "zone transfer not allowed")
	}
	readPast := false
	if rep.TxHeld() {
		// A transaction across shards holds a name that can change this
		// answer (heldread.go).
		hr, ok := c.readHeld(ctx, rep, z.Origin(), qname, routed)
		if !ok {
			return ede.Write(w, r, dns.RcodeServerFailure, dns.ExtendedErrorCodeNotReady, txn.HeldText)
		}
		if len(hr.preview) > 0 {
			z = z.With(hr.preview) // committed parts not applied yet
		}
		// Neither is the member's applied state: routers must not cache it.
		readPast = hr.undecided || len(hr.preview) > 0
	}

	// The client a policy answers for (internal/policy): the query's ECS
	// option, else its source. A malformed option is refused (RFC 7871
	// section 7.1.1).
	cl, ecs, err := policy.ClientOf(r, w.RemoteAddr())
	if err != nil {
		return ede.Write(w, r, dns.RcodeFormatError, dns.ExtendedErrorCodeOther, err.Error()+" (RFC 7871)")
	}
	cl.Meta = ctx // rules by geo read the geoip plugin's metadata

	facts := shardproto.Requested(r)
	// A signed zone's answers to a router are not signed (the router
	// signs what it merged: completeForRouter); a client's with DO are,
	// and so are the apex's keys.
	var keys *dnssec.Keys
	sec := c.sec.Load()
	if sec != nil && !routed && !facts && signedQuery(r, qname, z.Origin()) && sec.cfg.Signs(z.Origin()) {
		keys = sec.keysFor(rep, z.Origin()) // nil: none yet, the unsigned answer
	}
	if keys == nil && !routed && !facts && !unconfirmed && r.IsTsig() == nil && writePacked(w, r, z, &cl, ecs) {
		// The common answers, packed without a dns.Msg (rawwrite.go); a
		// router's query carries facts and indexes, a signed one is
		// signed by the server's WriteMsg.
		return dns.RcodeSuccess, nil
	}

	m := c.answer(r, z, qname, facts, cl, ecs)
	if check && pend.Changes(m) {
		// A name the answer carries (a CNAME's target, a name server, its
		// glue) is among what the entries read past change: the answer
		// waits for them after all, and is looked up again.
		if err := rep.CaughtUp(ctx, pend.Through()); err != nil {
			freshCount.WithLabelValues(c.member(), "failed").Inc()
			return ede.Write(w, r, dns.RcodeServerFailure, dns.ExtendedErrorCodeNotReady, "member could not confirm it is current: "+err.Error())
		}
		if z = rep.Match(qname); z == nil {
			return ede.Write(w, r, dns.RcodeRefused, dns.ExtendedErrorCodeNotAuthoritative, "no such zone here")
		}
		if readPast {
			// Its preview may be older than the state now applied.
			return ede.Write(w, r, dns.RcodeServerFailure, dns.ExtendedErrorCodeNotReady, txn.HeldText)
		}
		m = c.answer(r, z, qname, facts, cl, ecs)
	}
	if keys != nil {
		if sm := c.signedAnswer(sec, keys, r, z, qname, m); sm != nil {
			m = sm
		}
	}
	if routed && shardproto.SignedRequested(r) {
		// The router signs it: what only this member can tell of it.
		completeForRouter(rep, m, z)
	}
	if routed {
		// Read after the lookup: at least the state answered from.
		applied := rep.Applied()
		shardproto.AttachIndex(m, applied)
		if readPast {
			shardproto.MarkHeld(m) // the router does not cache it
		}
		signed := false
		if facts || hasSOA(m) {
			// craftroute presents one serial for the zone's shards.
			if serial, base, ok := z.Serial(); ok {
				shardproto.AttachSerial(m, z.Origin(), serial, base)
				signed = true
			}
		}
		// The router keeps a serial, and an index above the one it asked
		// for: signed, so that it can tell they are ours (auth.go).
		if asked, ok := shardproto.MinIndex(r); signed || (ok && applied > asked) {
			if l := c.leases.Load(); l != nil {
				shardproto.SignAnswer(m, l.key)
			}
		}
	}
	if notice != 0 {
		shardproto.AttachEpoch(m, notice, false)
	}
	if unconfirmed {
		staleCount.WithLabelValues(c.member(), "routed").Inc()
		ede.Add(m, dns.ExtendedErrorCodeStaleAnswer, "the member could not confirm with its group that this state is current")
	}
	w.WriteMsg(m)
	return dns.RcodeSuccess, nil
}

// answer looks qname up in z for query r from client cl, into a new reply:
// the member's facts too when a router asks for them. A policy's answer
// carries the query's ECS option ecs back with the scope the policy chose
// by (RFC 7871 section 7.2.1); other answers, which depend on no address,
// carry none, as before policies.
func (c *Craftstore) answer(r *dns.Msg, z *zone.Zone, qname string, facts bool, cl policy.Client, ecs *dns.EDNS0_SUBNET) *dns.Msg {
	q := r.Question[0]
	m := new(dns.Msg)
	m.SetReply(r)
	if opt := r.IsEdns0(); opt != nil {
		// RFC 6891 §7: an EDNS query gets an OPT record back.
		m.SetEdns0(dns.DefaultMsgSize, opt.Do())
	}
	if facts {
		// craftroute asks what this member holds about the name.
		shardproto.Attach(m, z.PartitionFor(m, qname, q.Qtype, &cl))
	} else {
		z.LookupFor(m, qname, q.Qtype, &cl)
	}
	if cl.Used && ecs != nil {
		policy.Echo(m, ecs, cl.Scope)
	}
	return m
}

// fence judges routed query r for qname by the router's map epoch it
// carries: fenced is the refusal to send when the router's map is too old
// for it, or when this member is behind it; notice is the member's newer
// epoch for the answer, 0 when the router's is current (or it sent none).
// pend is what committed entries the member read past change (nil: it
// applied the router's index). When the router is ahead of the member's
// map and the entries the member is applying (pend, or those it finds
// now) set the router's epoch, or a newer one, and change nothing of
// qname's answer, the member judges as it will once it applied them:
// judged is then those entries (the answer must not depend on what they
// change), else nil.
func (c *Craftstore) fence(ctx context.Context, rep *replica.Replica, r *dns.Msg, qname string, pend *replica.Pending) (notice uint64, fenced *dns.Msg, judged *replica.Pending) {
	epoch, owner := shardproto.RoutedEpoch(r)
	p := rep.Placement()
	if epoch != 0 && (p == nil || epoch > p.Map.Epoch) {
		if pend == nil {
			pend = rep.PendingFor(qname)
		}
		if pe := pend.Epoch(); epoch <= pe {
			// The entries move no partition of qname's and change no
			// shard (else they would change its answer): after them the
			// member passes the router's epoch, or notices its newer one.
			if epoch < pe {
				fenceCount.WithLabelValues("dns", "notice").Inc()
				return pe, nil, pend
			}
			return 0, nil, pend
		}
		// The router routes by a map this member has not applied: names
		// may have moved to its shard since (a migration's batch), which
		// its state lacks. It catches up with its leader; still behind
		// (its shard's part of the map is not committed here yet), it
		// answers as for a name a transaction holds: the router asks
		// another member, and again.
		fctx, cancel := context.WithTimeout(ctx, txn.RoutedWait)
		err := rep.Fresh(fctx)
		cancel()
		p = rep.Placement()
		switch {
		case err == nil && p != nil && epoch <= p.Map.Epoch:
		case p != nil && owner && ownsKey(p, c.placeKey(rep, p, qname)):
			// Asked as the owner of a name its shard owns by its own map
			// too: the router's map places it here as well, so no
			// partition of it moved here since; its state answers.
			return 0, nil, nil
		default:
			fenceCount.WithLabelValues("dns", "behind").Inc()
			return 0, ede.Reply(r, dns.RcodeServerFailure, dns.ExtendedErrorCodeNotReady, txn.HeldText), nil
		}
	}
	if epoch == 0 || p == nil || epoch >= p.Map.Epoch {
		return 0, nil, nil
	}
	key := c.placeKey(rep, p, qname)
	if key == "" {
		// Key mode "zone" and no zone here holds the name: routed by an
		// older map, it may have moved away since (a migration's batch).
		return 0, fencedReply(r, p, p.FencedText(epoch)), nil
	}
	if p.Fence(epoch, owner, key) != shardmap.Fenced {
		fenceCount.WithLabelValues("dns", "notice").Inc()
		return p.Map.Epoch, nil, nil
	}
	return 0, fencedReply(r, p, p.FencedText(epoch)), nil
}

// ownsKey reports whether p's shard owns key, a placeKey ("" owns nothing).
func ownsKey(p *shardmap.Place, key string) bool { return key != "" && p.Owns(key) }

// placeKey is what p's map places for qname: the name, or in key mode
// "zone" the origin of its zone here ("" when no zone here holds it).
func (c *Craftstore) placeKey(rep *replica.Replica, p *shardmap.Place, qname string) string {
	if p.Map.Key == shardmap.KeyZone {
		if z := rep.Match(qname); z != nil {
			return z.Origin()
		}
		return ""
	}
	return qname
}

// inZones reports whether qname (lower-case) is in one of the block's
// zones, which are lower-case too.
func (c *Craftstore) inZones(qname string) bool {
	for _, z := range c.Zones {
		if dnsname.In(qname, z) {
			return true
		}
	}
	return false
}

// hasSOA reports whether m carries an SOA record in its answer or
// authority section.
func hasSOA(m *dns.Msg) bool {
	for _, sec := range [][]dns.RR{m.Answer, m.Ns} {
		for _, rr := range sec {
			if rr.Header().Rrtype == dns.TypeSOA {
				return true
			}
		}
	}
	return false
}

// member is the member label of the metrics.
func (c *Craftstore) member() string { return strconv.FormatUint(c.cfg.id, 10) }

// Name implements plugin.Handler.
func (c *Craftstore) Name() string { return "craftstore" }

// CacheBypassZones implements cache.ZoneBypasser: a *cache* in front must
// not serve the zones of this block from its cache, which would break
// read-your-writes after an API or UPDATE write (as *dynupdate* does).
func (c *Craftstore) CacheBypassZones() []string { return c.Zones }
