package craftroute

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/dnswire"
	"github.com/craftdns/craftdns/internal/policy"
	"github.com/craftdns/craftdns/internal/rawreply"
	"github.com/craftdns/craftdns/internal/shardproto"

	"github.com/miekg/dns"
)

// The forwarding fast path: forward bytes, not messages.
//
// The common query (one question, class IN, from a client whose only EDNS
// option, if any, is a cookie) goes to the owner shard's first member as a
// query the router writes itself, straight into a buffer: the client's
// header flags and question, an OPT record with the client's buffer size
// and DO bit, the client's address as an ECS option (client.go), the
// partition (or fresh) option with the index to wait for, and the map's
// epoch: the bytes the slow path's dns.Msg would pack to. It goes out on
// one of the member's connected UDP sockets (udpmux.go). The member's answer
// is read without unpacking it (internal/dnswire): its header, its
// records' owners, types and RDATA lengths, its OPT record's options.
// When the member marks it final (partition mode: Final facts) and it holds
// nothing the router would change (key mode "name": no CNAME or DNAME to
// follow, no SOA whose serial the router presents, no referral to complete
// with glue), the router relays its bytes with Write: the client's ID, the
// OPT record's class and flags as the server's ScrubWriter sets them, and
// the private options cut off (the OPT record is the message's last, its
// options all private: a cut at the OPT's RDATA, or at the OPT record when
// the client sent none). No dns.Msg is built for the answer.
//
// Anything else takes the slow path (resolve.go): a member's answer that
// is not final, or carries another option (an epoch notice, an Extended
// DNS Error), a record type the path does not check, a compressed or
// truncated answer, one longer than the client's buffer or, to a UDP
// client, 1,220 bytes (the server's Scrub would compress it), SERVFAIL, a
// timeout; and a client whose query carries other options, an ECS option,
// TSIG, or whose reply goes through a plugin that needs the dns.Msg
// (rawreply). An answer the member gave and the fast path declined is
// unpacked and handed to the slow path as the owner's answer (prefetch),
// so that the member is not asked twice; a failure leaves the slow path to
// start over (it fails over to the next member).
//
// The relayed bytes are the slow path's byte for byte: the member packs its
// answer uncompressed (it is short), and a router that unpacked and packed
// it again, as the slow path does, writes the same bytes (FuzzRelay and
// the integration tests' TestFastPathEqualsSlowPath check it).

// maxFastRelay is the longest answer the fast path relays: the server's
// Scrub compresses longer UDP answers for IPv6 clients (NSD's limit).
const maxFastRelay = 1220

// fastQueryMax bounds the query the fast path writes: header, a name of at
// most 255 bytes, qtype and qclass, the OPT record with an IPv6 client's
// ECS (24 bytes), the partition option and index (15) and the epoch (13).
const fastQueryMax = 512

// prefetch is the owner shard's answer to a query that the fast path
// asked and declined: the slow path continues from it.
type prefetch struct {
	rt      *routing
	resp    *dns.Msg // as exchange returns it (learned from: learn)
	began   time.Time
	cacheOn bool
	start   uint64
}

// fastOK reports whether client query r may take the fast path: one
// question (ServeDNS checked it and its class), no record but an OPT
// record of version 0 whose only option, if any, is a cookie (a router
// never sends the client's cookie on: build drops it).
func fastOK(r *dns.Msg) bool {
	if len(r.Answer) != 0 || len(r.Ns) != 0 || len(r.Extra) > 1 {
		return false
	}
	if t := r.Question[0].Qtype; t == dns.TypeAXFR || t == dns.TypeIXFR {
		return false
	}
	if len(r.Extra) == 1 {
		opt, ok := r.Extra[0].(*dns.OPT)
		if !ok || opt.Version() != 0 {
			return false
		}
		for _, o := range opt.Option {
			if o.Option() != dns.EDNS0COOKIE {
				return false
			}
		}
	}
	return true
}

// serveFast answers client query r through the fast path when it can: it
// reports whether it wrote the answer, and returns, when it did not, the
// owner's answer it got (nil when it got none), which the slow path takes.
//
// It runs on the server's goroutine for the query, whose stack starts
// small: its frame, live during the exchange (the deepest point of the
// query's path), holds little, the rest is in the pooled fastQuery and in
// frames of their own (fastAsk, fastAnswer), so that a query's stack does
// not grow again there.
func (c *Craftroute) serveFast(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (bool, *prefetch) {
	if c.ex != nil || c.cfg.slowOnly || !fastOK(r) {
		return false, nil
	}
	f := fastQueries.Get().(*fastQuery)
	defer f.put()
	if !c.fastAsk(ctx, f, w, r) {
		return false, nil
	}
	return c.fastAnswer(f, w, r)
}

// fastQuery is the state of one query on the fast path, pooled.
type fastQuery struct {
	wt   *waiter
	pre  prefetch
	rs   rawreply.Recorders
	s    *Shard
	m    *Member
	ans  []byte    // the member's answer (in wt)
	at   time.Time // when it came
	qend int       // where the query's question ends
	tcp  bool      // the client asked over TCP
}

var fastQueries = sync.Pool{New: func() any { return new(fastQuery) }}

func (f *fastQuery) put() {
	if f.wt != nil {
		waiters.Put(f.wt)
	}
	*f = fastQuery{}
	fastQueries.Put(f)
}

// fastAsk sends the query to the owner shard's first member and waits for
// its answer (f.ans); false when the fast path does not apply or
// no answer came (a timeout marks the member failed: the slow path tries
// the others first).
//
//go:noinline
func (c *Craftroute) fastAsk(ctx context.Context, f *fastQuery, w dns.ResponseWriter, r *dns.Msg) bool {
	var ok bool
	if f.rs, ok = rawreply.Writer(w); !ok {
		return false
	}
	client := w.RemoteAddr()
	_, f.tcp = client.(*net.TCPAddr)
	rt := c.routes()
	if rt == nil {
		return false
	}
	q := r.Question[0]
	f.pre = prefetch{rt: rt, began: time.Now()}
	named := rt.key == keyName
	if named {
		// As resolveOnce: the negative cache first (a hit is the slow
		// path's to answer), and the notice count before any exchange.
		f.pre.cacheOn = c.leases.valid(f.pre.began)
		f.pre.start = c.changes.begin()
		if f.pre.cacheOn {
			opt := r.IsEdns0()
			if c.neg.has(q.Name, q.Qtype, opt != nil, opt != nil && opt.Do(), c.changes.valid) {
				return false
			}
		}
	}
	s := rt.shard(rt.ring.Locate(c.keyOf(rt.key, dnsname.Lower(q.Name))))
	if s == nil {
		return false
	}
	f.s = s
	var buf [8]*Member
	order := s.Order(f.pre.began, buf[:0])
	if len(order) == 0 {
		return false
	}
	f.m = order[0]
	f.wt = waiters.Get().(*waiter)
	var minIndex uint64
	withIndex := c.leases.valid(f.pre.began)
	if withIndex {
		minIndex = s.minIndex.Load()
	}
	query, qend, ok := appendFastQuery(f.wt.q[:0], r, policy.AddrOf(client), !named, minIndex, withIndex, rt.epoch())
	if !ok {
		return false
	}
	f.qend = qend
	var err error
	if f.m.udp == nil {
		// A member asked over TLS: its connections take every query.
		f.ans, err = f.m.tcp.exchange(query, f.wt, f.m.timeout)
	} else if n, uerr := f.m.udp.exchange(query, f.wt, f.m.timeout); uerr != nil {
		err = uerr
	} else {
		f.ans = f.wt.buf[:n]
	}
	if f.m.udp != nil && (errors.Is(err, errMuxTooLong) || (err == nil && (len(f.ans) > querySize(r) || len(f.ans) > 2 && f.ans[2]&(dnswire.FlagTC>>8) != 0))) {
		// Asked again over TCP, as Member.exchange does: a TCP client
		// gets the whole answer relayed, a UDP client's is truncated by
		// the slow path (the member truncated its own to a size that
		// counted the private options).
		f.ans, err = f.m.tcp.exchange(query, f.wt, f.m.timeout)
	}
	f.at = time.Now()
	s.observeDuration(f.at.Sub(f.pre.began))
	if err != nil {
		if errors.Is(err, errMuxTimeout) && ctx.Err() == nil {
			f.m.Failed(f.at, c.cfg.downFor) // the slow path tries the others first
		}
		return false
	}
	return true
}

// fastAnswer relays the member's answer f holds when judgeAnswer lets it,
// and reports whether it did; else it returns the answer unpacked for the
// slow path (nil when the slow path is to ask again).
//
//go:noinline
func (c *Craftroute) fastAnswer(f *fastQuery, w dns.ResponseWriter, r *dns.Msg) (bool, *prefetch) {
	ans, query := f.ans, f.wt.q[:]
	h, ok := dnswire.ParseHeader(ans)
	if !ok || !h.Response || h.Opcode != dns.OpcodeQuery || h.QD != 1 || len(ans) < f.qend ||
		!bytes.Equal(ans[dnswire.HeaderLen:f.qend], query[dnswire.HeaderLen:f.qend]) {
		return false, nil // not an answer to this question: the slow path asks again
	}
	if h.Rcode == dns.RcodeServerFailure {
		return false, nil // Shard.Exchange judges it (held, not current, ...)
	}
	f.m.Succeeded(f.at)
	f.m.count(int(h.Rcode))
	s := f.s
	opt := r.IsEdns0()
	size := dns.MaxMsgSize // the server's Scrub: a TCP client takes any answer
	if !f.tcp {
		size = udpSize(r)
	}
	out, rcode, rel, ok := judgeAnswer(ans, h, f.qend, f.pre.rt.key == keyName, opt != nil, opt != nil && opt.Do(), opt, size, f.tcp)
	if ok {
		c.learnWire(s, rel)
		f.rs.SetRcode(rcode)
		binary.BigEndian.PutUint16(out, r.Id)
		w.Write(out)
		fastRelayed.Inc()
		return true, nil
	}
	// Declined: the slow path takes the member's answer as it would have
	// had it from Shard.Exchange.
	fastDeclined.Inc()
	resp := new(dns.Msg)
	if err := resp.Unpack(ans); err != nil {
		return false, nil
	}
	resp.Id = r.Id
	if c.checkEpoch(s, resp) != nil {
		return false, nil // fenced: the slow path asks again and reads the map
	}
	c.learn(s, resp)
	pre := f.pre
	pre.resp = resp
	return false, &pre
}

// udpSize is the longest UDP message m's sender takes (RFC 6891 §6.2.5:
// its OPT record's size, at least 512 bytes; 512 without one), as the
// server's Scrub truncates a reply to it (request.Request.Size).
func udpSize(m *dns.Msg) int {
	if o := m.IsEdns0(); o != nil {
		return max(dns.MinMsgSize, int(o.UDPSize()))
	}
	return dns.MinMsgSize
}

// querySize is the longest UDP answer the member query for client query r
// allows: the client's size, or dns.DefaultMsgSize in the OPT record the
// router adds for a client without one.
func querySize(r *dns.Msg) int {
	if r.IsEdns0() == nil {
		return dns.DefaultMsgSize
	}
	return udpSize(r)
}

// appendFastQuery appends to b the wire form of the query the slow path
// sends a member for client query r from client (query, forward,
// withClient, Craftroute.exchange's index and epoch), with ID 0: fresh
// for key mode "zone", the index to wait for when withIndex, the map's
// epoch when it has one. It returns the query and where its question
// ends.
func appendFastQuery(b []byte, r *dns.Msg, client netip.Addr, fresh bool, index uint64, withIndex bool, epoch uint64) ([]byte, int, bool) {
	q := r.Question[0]
	var flags uint16
	if r.RecursionDesired {
		flags |= dnswire.FlagRD
	}
	if r.CheckingDisabled {
		flags |= dnswire.FlagCD
	}
	b = append(b, 0, 0, byte(flags>>8), byte(flags), 0, 1, 0, 0, 0, 0, 0, 1)
	b = b[:cap(b)]
	off, err := dns.PackDomainName(q.Name, b, dnswire.HeaderLen, nil, false)
	if err != nil || off+4+11 > len(b) {
		return nil, 0, false
	}
	b = b[:off]
	b = binary.BigEndian.AppendUint16(b, q.Qtype)
	b = binary.BigEndian.AppendUint16(b, q.Qclass)
	qend := len(b)

	// The OPT record: the client's buffer size and DO bit, else
	// dns.DefaultMsgSize (RFC 6891 §6.1.2).
	udp, ttl := uint16(dns.DefaultMsgSize), uint32(0)
	if opt := r.IsEdns0(); opt != nil {
		udp = opt.UDPSize()
		if opt.Do() {
			ttl = 1 << 15
		}
	}
	b = append(b, 0, 0, byte(dns.TypeOPT))
	b = binary.BigEndian.AppendUint16(b, udp)
	b = binary.BigEndian.AppendUint32(b, ttl)
	rdlen := len(b)
	b = append(b, 0, 0)
	b = policy.AppendClientECS(b, client) // withClient's option
	b = shardproto.AppendRouted(b, fresh, index, withIndex, epoch)
	binary.BigEndian.PutUint16(b[rdlen:], uint16(len(b)-rdlen-2))
	return b, qend, true
}

// relayed is what the router keeps of a relayed answer: its private
// options' payloads (nil when absent).
type relayed struct {
	index, serial, mac []byte
}

// judgeAnswer decides whether ans, a member's answer with header h to
// the fast path's query whose question ends at qend, is relayed as it is:
// it returns the reply's bytes (a prefix of ans, changed in place; its ID
// is the caller's to set), its rcode and the private options the router
// keeps. named is key mode "name" (the answer must be final and need
// nothing of the router); edns, do and opt are the client's OPT record;
// size is the client's buffer; tcp is set for a client over TCP (the
// server's Scrub compresses no TCP answer).
func judgeAnswer(ans []byte, h dnswire.Header, qend int, named, edns, do bool, opt *dns.OPT, size int, tcp bool) ([]byte, int, relayed, bool) {
	var rel relayed
	if h.Truncated || (!tcp && len(ans) > maxFastRelay) {
		return nil, 0, rel, false
	}
	rcode := int(h.Rcode)
	switch {
	case rcode == dns.RcodeSuccess:
	case rcode == dns.RcodeNameError && !named:
	default:
		return nil, 0, rel, false
	}
	if named && h.AN == 0 {
		return nil, 0, rel, false // NODATA, referrals: the router's serial, glue
	}
	off := qend
	total := int(h.AN) + int(h.NS) + int(h.AR)
	optAt := -1
	var optRR dnswire.RR
	for i := range total {
		rr, ok := dnswire.NextRR(ans, off)
		if !ok || dnswire.HasPointer(ans, rr.Off) || !plainRdata(ans, rr) {
			return nil, 0, rel, false
		}
		switch {
		case rr.Type == dns.TypeOPT:
			if i != total-1 || i < int(h.AN)+int(h.NS) || rr.Off+1 != rr.Rdata-10 || ans[rr.Off] != 0 {
				return nil, 0, rel, false // one OPT, the last record, owned by the root
			}
			optAt, optRR = rr.Off, rr
		case named && i < int(h.AN)+int(h.NS) && (rr.Type == dns.TypeSOA || rr.Type == dns.TypeCNAME || rr.Type == dns.TypeDNAME):
			return nil, 0, rel, false // the router follows a chain, presents the serial
		}
		off = rr.End
	}
	if optAt < 0 || off != len(ans) || optRR.TTL>>24 != 0 {
		return nil, 0, rel, false
	}
	// The options: the private ones and the ECS option the router added.
	rdata := ans[optRR.Rdata:optRR.End]
	var facts []byte
	var seen uint8
	for p := 0; p < len(rdata); {
		o, next, ok := dnswire.NextOption(rdata, p)
		if !ok {
			return nil, 0, rel, false
		}
		var bit uint8
		switch o.Code {
		case shardproto.Code:
			bit, facts = 1, o.Data
		case shardproto.IndexCode:
			bit, rel.index = 2, o.Data
		case shardproto.SerialCode:
			bit, rel.serial = 4, o.Data
		case shardproto.AuthCode:
			bit, rel.mac = 8, o.Data
		case shardproto.HeldCode:
			bit = 16 // a final answer is never cached: nothing to do
		case dns.EDNS0SUBNET:
			bit = 32 // a policy's scope for the client's address: cut
		default:
			return nil, 0, rel, false // an epoch notice, an Extended DNS Error, ...
		}
		if seen&bit != 0 {
			return nil, 0, rel, false
		}
		seen |= bit
		p = next
	}
	if named != (facts != nil) || (named && !shardproto.FinalData(facts)) {
		return nil, 0, rel, false
	}
	// The reply: up to the OPT record, then the client's OPT without
	// options (as the server's SizeAndDo makes it), or none.
	end := optAt
	if edns {
		end = optRR.Rdata
	}
	if end > size {
		return nil, 0, rel, false // the server's Scrub would truncate it
	}
	if edns {
		p := optAt + 3 // the root name and the type
		binary.BigEndian.PutUint16(ans[p:], opt.UDPSize())
		ttl := optRR.TTL & 0xff00
		if do {
			ttl |= 1 << 15
		}
		binary.BigEndian.PutUint32(ans[p+2:], ttl)
		binary.BigEndian.PutUint16(ans[p+6:], 0)
	} else {
		binary.BigEndian.PutUint16(ans[10:], h.AR-1)
	}
	return ans[:end], rcode, rel, true
}

// plainRdata reports whether rr's RDATA is one the fast path relays: of a
// type it checks as dns.Msg.Unpack would take it, and uncompressed (the
// slow path packs answers uncompressed when they are this short).
func plainRdata(msg []byte, rr dnswire.RR) bool {
	d := msg[rr.Rdata:rr.End]
	name := func(d []byte, off int) bool {
		end, ok := dnswire.SkipName(d, off)
		return ok && end == len(d) && !dnswire.HasPointer(d, off)
	}
	switch rr.Type {
	case dns.TypeA:
		return len(d) == 4
	case dns.TypeAAAA:
		return len(d) == 16
	case dns.TypeNS, dns.TypeCNAME, dns.TypePTR, dns.TypeDNAME:
		return name(d, 0)
	case dns.TypeMX:
		return len(d) > 2 && name(d, 2)
	case dns.TypeSRV:
		return len(d) > 6 && name(d, 6)
	case dns.TypeSOA:
		p, ok := dnswire.SkipName(d, 0)
		if !ok || dnswire.HasPointer(d, 0) {
			return false
		}
		p2, ok := dnswire.SkipName(d, p)
		return ok && !dnswire.HasPointer(d, p) && p2+20 == len(d)
	case dns.TypeTXT:
		if len(d) == 0 {
			return false
		}
		for p := 0; p < len(d); p += 1 + int(d[p]) {
			if p+1+int(d[p]) > len(d) {
				return false
			}
		}
		return true
	case dns.TypeOPT:
		return true // its options are read apart
	}
	return false
}

// learnWire keeps, from a relayed answer, what exchange keeps of one:
// an applied index above the shard's and the zone's serial, when the
// member signed them. A serial the shard's last relayed answer carried
// already is passed by, MAC and all: a relayed answer presents no serial,
// and a resolution that presents one asks the shards it has not heard
// from since it began (serials.current), which this answer predates.
func (c *Craftroute) learnWire(s *Shard, rel relayed) {
	if rel.mac == nil || (rel.index == nil && rel.serial == nil) {
		return
	}
	var (
		idx   uint64
		raise bool
	)
	if len(rel.index) == 8 {
		idx = binary.BigEndian.Uint64(rel.index)
		raise = idx > s.minIndex.Load()
	}
	zone, serial, base, observe := shardproto.SerialData(rel.serial)
	if last := s.lastSerial.Load(); observe && last != nil && bytes.Equal(*last, rel.serial) {
		observe = false
	}
	if !raise && !observe {
		return
	}
	if !shardproto.PartsSigned(c.leases.key, rel.mac, rel.index, rel.serial) {
		return
	}
	if raise {
		s.raise(idx)
	}
	if observe {
		c.soa.observe(c.zoneNames.name(zone), s.Name, serial, base, time.Now())
		kept := bytes.Clone(rel.serial)
		s.lastSerial.Store(&kept)
	}
}

// zoneNames remembers the last zone name a relayed answer carried in wire
// form, so that its string is not made anew for every answer.
type zoneNames struct {
	last atomic.Pointer[zoneName]
}

type zoneName struct {
	wire []byte
	name string // canonical
}

func (zn *zoneNames) name(wire []byte) string {
	if l := zn.last.Load(); l != nil && bytes.Equal(l.wire, wire) {
		return l.name
	}
	n := &zoneName{wire: bytes.Clone(wire), name: dnsname.Lower(shardproto.ZoneName(wire))}
	zn.last.Store(n)
	return n.name
}
