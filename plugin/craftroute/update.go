package craftroute

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/coredns/coredns/plugin/tsig"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/ede"
	"github.com/craftdns/craftdns/internal/shardproto"
	"github.com/craftdns/craftdns/internal/txn"
	"github.com/craftdns/craftdns/internal/zonerules"

	"github.com/miekg/dns"
)

// updateTimeout bounds one forwarded UPDATE once the connection is made: the
// member answers after the update is committed by its group, which may take
// up to craftstore's write timeout.
const updateTimeout = 15 * time.Second

// tsigFudge is the fudge of the router's signature (RFC 8945 §5.2.3).
const tsigFudge = 300

// spanNames is how many names a refusal of an update spanning shards lists.
const spanNames = 8

// serveUpdate handles an RFC 2136 UPDATE. The tsig plugin in front has
// validated and stripped the client's signature; the router signs the
// message again with the same key and sends it over TCP to the shard that
// holds all its names. An UPDATE is never forwarded unsigned. In key mode
// "name" one whose names span shards runs as a transaction over the shards'
// APIs (updateTx).
func (c *Craftroute) serveUpdate(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	// A member that fenced the router's map wrote nothing: the router
	// reads the map and routes the update again (fence.go), as long as
	// the map moves (a migration moves it a batch at a time).
	for try := 0; ; try++ {
		mctx, mark := withFenceMark(c.withRouteEpoch(ctx))
		cw := &capture{ResponseWriter: w}
		rcode, err := c.serveUpdateOnce(mctx, cw, r)
		if f := mark.fenced(); try < fenceRetries && f != nil && c.refreshMap(ctx, f) {
			continue
		}
		if cw.m != nil {
			w.WriteMsg(cw.m)
		}
		return rcode, err
	}
}

// capture keeps the message written to it instead of sending it.
type capture struct {
	dns.ResponseWriter
	m *dns.Msg
}

func (w *capture) WriteMsg(m *dns.Msg) error {
	w.m = m
	return nil
}

// serveUpdateOnce routes an UPDATE by the map the router routes by.
func (c *Craftroute) serveUpdateOnce(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	if len(r.Question) != 1 || r.Question[0].Qtype != dns.TypeSOA || r.Question[0].Qclass != dns.ClassINET {
		return ede.Write(w, r, dns.RcodeFormatError, dns.ExtendedErrorCodeOther, "the zone section must hold one SOA question of class IN")
	}
	origin := dnsname.Lower(dns.Fqdn(r.Question[0].Name))
	if c.zoneOf(origin) == "" {
		// RFC 2136 §3.1.1: not authoritative for the zone.
		return ede.Write(w, r, dns.RcodeNotAuth, dns.ExtendedErrorCodeNotAuthoritative, "no such zone here")
	}
	key, ok := tsig.ValidatedKeyName(ctx)
	if !ok {
		return ede.Write(w, r, dns.RcodeRefused, dns.ExtendedErrorCodeProhibited,
			"UPDATE needs a valid TSIG signature: the router forwards signed updates only")
	}
	key = dnsname.Lower(dns.Fqdn(key))
	secret, ok := c.cfg.keys[key]
	if !ok {
		return ede.Write(w, r, dns.RcodeRefused, dns.ExtendedErrorCodeProhibited,
			fmt.Sprintf("the router has no secret for key %s to sign the forwarded update with", key))
	}
	alg := c.cfg.keyAlgs[key]
	if alg == "" {
		alg = dns.HmacSHA256
	}
	// RFC 2136 §3.2 and §3.4.1.3: every prerequisite and update inside the zone.
	for _, rr := range append(r.Answer[:len(r.Answer):len(r.Answer)], r.Ns...) {
		if !dns.IsSubDomain(origin, dnsname.Lower(rr.Header().Name)) {
			return ede.Write(w, r, dns.RcodeNotZone, dns.ExtendedErrorCodeOther,
				fmt.Sprintf("%s is outside zone %s", rr.Header().Name, origin))
		}
	}

	s := c.zoneShard(origin)
	if c.keyMode() == keyName {
		r = c.dropOldSOA(ctx, origin, r)
		parts, why, err := c.updateParts(ctx, origin, r)
		switch {
		case errors.Is(err, errZoneAbsent):
			return ede.Write(w, r, dns.RcodeNotAuth, dns.ExtendedErrorCodeNotAuthoritative, err.Error())
		case err != nil:
			log.Warningf("UPDATE for %s: %v", origin, err)
			return ede.Write(w, r, dns.RcodeServerFailure, dns.ExtendedErrorCodeNoReachableAuthority, err.Error())
		case len(parts) > 1 && !c.haveShardAPIs():
			return ede.Write(w, r, dns.RcodeRefused, dns.ExtendedErrorCodeProhibited,
				why+": the router runs such an update as a transaction over the shards' APIs, and has none (shard_api)")
		case len(parts) > 1:
			return c.updateTx(ctx, w, r, origin, key, parts)
		}
		for only := range parts {
			s = only
		}
	}

	resp, err := c.forwardUpdate(ctx, s, r, key, alg, secret)
	if err != nil {
		log.Warningf("UPDATE for %s to shard %s: %v", origin, s.Name, err)
		if err.sent {
			updatesForwarded.WithLabelValues(s.Name, "none").Inc() // sent, no answer
		}
		return ede.Write(w, r, dns.RcodeServerFailure, err.ede, err.Error())
	}
	updatesForwarded.WithLabelValues(s.Name, rcodeString(resp.Rcode)).Inc()
	// The member's rcode, with the Extended DNS Errors it gave.
	m := ede.Reply(r, resp.Rcode, 0, "")
	if opt, ropt := m.IsEdns0(), resp.IsEdns0(); opt != nil && ropt != nil {
		for _, o := range ropt.Option {
			if e, ok := o.(*dns.EDNS0_EDE); ok {
				opt.Option = append(opt.Option, e)
			}
		}
	}
	w.WriteMsg(m)
	return dns.RcodeSuccess, nil
}

// dropOldSOA returns r without the SOA records it adds whose serial is not
// newer than the zone's (serial.go): one server ignores those (RFC 2136
// §3.4.2.2), but each shard would compare them with its own serial.
func (c *Craftroute) dropOldSOA(ctx context.Context, origin string, r *dns.Msg) *dns.Msg {
	var cur uint32
	known := false
	keep := r.Ns[:0:0]
	for _, rr := range r.Ns {
		if soa, ok := rr.(*dns.SOA); ok && soa.Hdr.Class == dns.ClassINET {
			if !known {
				if cur, known = c.currentSerial(ctx, origin); !known {
					return r
				}
			}
			if !zonerules.SerialAfter(soa.Serial, cur) {
				continue
			}
		}
		keep = append(keep, rr)
	}
	if len(keep) == len(r.Ns) {
		return r
	}
	m := r.Copy()
	m.Ns = keep
	return m
}

// updateParts splits UPDATE r by the shards that hold its names in key
// mode "name": the owner shards of the names of its prerequisite and
// update sections, where a name at the apex, an NS (or DS) record or a name
// at or below a zone cut means every shard. Each part keeps r's order. When
// there is more than one, why says which names span which shards.
func (c *Craftroute) updateParts(ctx context.Context, origin string, r *dns.Msg) (parts map[*Shard]*dns.Msg, why string, err error) {
	p := newPlacer(c, origin)
	var items []placement
	for i, sec := range [][]dns.RR{r.Answer, r.Ns} {
		for _, rr := range sec {
			h := rr.Header()
			pl := placement{dnsname.Lower(h.Name), h.Rrtype}
			if ns, ok := rr.(*dns.NS); ok && i == 1 && h.Class == dns.ClassINET {
				p.addNS(ns)
			}
			items = append(items, pl)
		}
	}
	if len(items) == 0 {
		return map[*Shard]*dns.Msg{c.shardFor(origin): r}, "", nil
	}
	cctx, cancel := context.WithTimeout(ctx, updateTimeout)
	defer cancel()
	if err := p.resolve(cctx, items); err != nil {
		return nil, "", err
	}
	parts = map[*Shard]*dns.Msg{}
	part := func(s *Shard) *dns.Msg {
		if parts[s] == nil {
			parts[s] = &dns.Msg{}
		}
		return parts[s]
	}
	var (
		names []string
		seen  = map[string]bool{}
		k     = 0
	)
	for i, sec := range [][]dns.RR{r.Answer, r.Ns} {
		for _, rr := range sec {
			it := items[k]
			k++
			ss := p.shards(it.name, it.rrtype)
			for _, s := range ss {
				if i == 0 {
					part(s).Answer = append(part(s).Answer, rr)
				} else {
					part(s).Ns = append(part(s).Ns, rr)
				}
			}
			if seen[it.name] {
				continue
			}
			seen[it.name] = true
			if len(ss) > 1 {
				names = append(names, it.name+" (on every shard)")
			} else {
				names = append(names, it.name)
			}
		}
	}
	if len(parts) == 1 {
		for s := range parts {
			return map[*Shard]*dns.Msg{s: r}, "", nil
		}
	}
	list := make([]string, 0, len(parts))
	for s := range parts {
		list = append(list, s.Name)
	}
	sort.Strings(list)
	if len(names) > spanNames {
		names = append(names[:spanNames], "...")
	}
	return parts, fmt.Sprintf("update spans shards %s (names %s)", strings.Join(list, ", "), strings.Join(names, ", ")), nil
}

// updateTx applies an UPDATE whose names span shards as one transaction
// (txn.go): every part's prerequisites hold and every part is applied, or
// nothing is. The answer is NOERROR, or the rcode of the first part (in
// shard name order) that failed, with its reason as an Extended DNS Error.
func (c *Craftroute) updateTx(ctx context.Context, w dns.ResponseWriter, r *dns.Msg, origin, key string, parts map[*Shard]*dns.Msg) (int, error) {
	prep := make(map[*Shard]txn.Prepare, len(parts))
	for s, m := range parts {
		packed, err := txn.PackUpdate(m.Answer, m.Ns)
		if err != nil {
			return ede.Write(w, r, dns.RcodeFormatError, dns.ExtendedErrorCodeOther, err.Error())
		}
		prep[s] = txn.Prepare{Update: packed, Key: key}
	}
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), updateTimeout)
	defer cancel()
	res := c.txc.runTx(tctx, origin, prep)
	switch {
	case res.committed:
		for s := range parts {
			updatesForwarded.WithLabelValues(s.Name, rcodeString(dns.RcodeSuccess)).Inc()
		}
		return ede.Write(w, r, dns.RcodeSuccess, 0, "")
	case res.failed != nil && res.err == nil:
		rcode := cmp.Or(res.vote.Rcode, dns.RcodeRefused)
		updatesForwarded.WithLabelValues(res.failed.Name, rcodeString(rcode)).Inc()
		return ede.Write(w, r, rcode, dns.ExtendedErrorCodeOther,
			fmt.Sprintf("shard %s: %s; nothing was written", res.failed.Name, res.vote.Error))
	case res.failed != nil:
		log.Warningf("UPDATE for %s: %v", origin, res.err)
		return ede.Write(w, r, dns.RcodeServerFailure, dns.ExtendedErrorCodeNoReachableAuthority,
			fmt.Sprintf("shard %s: %v; nothing was written", res.failed.Name, res.err))
	}
	log.Warningf("UPDATE for %s: %v", origin, res.err)
	return ede.Write(w, r, dns.RcodeServerFailure, dns.ExtendedErrorCodeOther, fmt.Sprint(res.err))
}

// updateError is a failed forward and the Extended DNS Error code for it.
type updateError struct {
	ede  uint16
	msg  string
	sent bool // the update reached a member
}

func (e *updateError) Error() string { return e.msg }

// forwardUpdate sends r, signed with key, over TCP to the members of s in
// order of liveness. A connection that could not be made moves on to the
// next member, and so does SERVFAIL with the Extended DNS Error Not Ready:
// the member took no writes (it is stopping, cut off or failing) and wrote
// nothing. Otherwise, once the update is sent, no answer is an error, since
// it may or may not have been applied.
func (c *Craftroute) forwardUpdate(ctx context.Context, s *Shard, r *dns.Msg, key, alg, secret string) (*dns.Msg, *updateError) {
	m := r.Copy()
	if t := m.IsTsig(); t != nil {
		m.Extra = m.Extra[:len(m.Extra)-1]
	}
	if m.IsEdns0() == nil {
		// EDNS whatever the client sent: a member's Extended DNS Error
		// (Not Ready: nothing written, try another) needs an OPT record.
		m.SetEdns0(dns.DefaultMsgSize, false)
	}
	shardproto.Strip(m) // the router's options are the router's to set
	if e := c.writeEpoch(ctx); e != 0 {
		shardproto.SetEpoch(m, e, true) // the shard owns what it is sent
	}
	client := func(mem *Member) *dns.Client {
		cl := &dns.Client{
			Net:          "tcp",
			DialTimeout:  c.cfg.timeout,
			WriteTimeout: updateTimeout,
			ReadTimeout:  updateTimeout,
			TsigSecret:   map[string]string{key: secret},
		}
		if mem.tls != nil {
			cl.Net, cl.TLSConfig = "tcp-tls", mem.tls
		}
		return cl
	}
	var (
		lastErr error
		last    *dns.Msg // the last not-ready answer
		resp    *dns.Msg
		uerr    *updateError
	)
	_, cerr := s.failover(ctx, nil, func(_ int, mem *Member) bool {
		cl := client(mem)
		conn, err := cl.DialContext(ctx, mem.dial)
		if err != nil {
			mem.Failed(time.Now(), c.cfg.downFor)
			lastErr = fmt.Errorf("member %s: %w", mem.Addr, err)
			return false
		}
		// Signed per member: signing on send takes the TSIG record off
		// the message.
		signed := m.Copy()
		signed.SetTsig(key, alg, tsigFudge, time.Now().Unix())
		fctx, cancel := context.WithTimeout(ctx, updateTimeout)
		r, _, err := cl.ExchangeWithConnContext(fctx, signed, conn)
		cancel()
		conn.Close()
		switch {
		case err != nil:
			// Sent: it may have been applied, so no other member gets it.
			mem.Failed(time.Now(), c.cfg.downFor)
			uerr = &updateError{ede: dns.ExtendedErrorCodeOther, sent: true,
				msg: fmt.Sprintf("shard %s member %s: %v: the update may or may not have been applied", s.Name, mem.Addr, err)}
		case r.Rcode == dns.RcodeServerFailure && notCurrent(r):
			mem.Failed(time.Now(), c.cfg.downFor)
			last = r
			return false
		default:
			mem.Succeeded(time.Now())
			if f := c.checkEpoch(s, r); f != nil {
				noteFenced(ctx, f)
			}
			resp = r
		}
		return true
	})
	if resp != nil || uerr != nil {
		return resp, uerr
	}
	if last != nil {
		return last, nil // every member said not ready: its answer says why
	}
	if lastErr == nil {
		lastErr = cerr
	}
	if lastErr == nil {
		lastErr = fmt.Errorf("no members")
	}
	return nil, &updateError{ede: dns.ExtendedErrorCodeNoReachableAuthority,
		msg: fmt.Sprintf("shard %s: no member reachable, nothing sent: %v", s.Name, lastErr)}
}
