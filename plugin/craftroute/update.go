package craftroute

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/coredns/coredns/plugin/tsig"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/ede"

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
// holds all its names. An UPDATE is never forwarded unsigned, and never
// split: in key mode "name" one whose names span shards is refused.
func (c *Craftroute) serveUpdate(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
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
	if c.cfg.key == keyName {
		var why string
		var err error
		s, why, err = c.updateShard(ctx, origin, r)
		switch {
		case errors.Is(err, errZoneAbsent):
			return ede.Write(w, r, dns.RcodeNotAuth, dns.ExtendedErrorCodeNotAuthoritative, err.Error())
		case err != nil:
			log.Warningf("UPDATE for %s: %v", origin, err)
			return ede.Write(w, r, dns.RcodeServerFailure, dns.ExtendedErrorCodeNoReachableAuthority, err.Error())
		case s == nil:
			return ede.Write(w, r, dns.RcodeRefused, dns.ExtendedErrorCodeProhibited, why)
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

// updateShard returns the one shard that holds every name of UPDATE r in
// key mode "name": the owner shards of the names of its prerequisite and
// update sections, where a name at the apex, an NS (or DS) record or a name
// at or below a zone cut means every shard. When that is more than one
// shard it returns nil and why the update is refused.
func (c *Craftroute) updateShard(ctx context.Context, origin string, r *dns.Msg) (*Shard, string, error) {
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
		return c.shardFor(origin), "", nil
	}
	cctx, cancel := context.WithTimeout(ctx, updateTimeout)
	defer cancel()
	if err := p.resolve(cctx, items); err != nil {
		return nil, "", err
	}
	var (
		shards = map[*Shard]bool{}
		names  []string
		seen   = map[string]bool{}
	)
	for _, it := range items {
		ss := p.shards(it.name, it.rrtype)
		for _, s := range ss {
			shards[s] = true
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
	if len(shards) == 1 {
		for s := range shards {
			return s, "", nil
		}
	}
	list := make([]string, 0, len(shards))
	for s := range shards {
		list = append(list, s.Name)
	}
	sort.Strings(list)
	if len(names) > spanNames {
		names = append(names[:spanNames], "...")
	}
	return nil, fmt.Sprintf("update spans shards %s (names %s): key mode name applies an update on one shard only; send one name per message or use key zone",
		strings.Join(list, ", "), strings.Join(names, ", ")), nil
}

// updateError is a failed forward and the Extended DNS Error code for it.
type updateError struct {
	ede  uint16
	msg  string
	sent bool // the update reached a member
}

func (e *updateError) Error() string { return e.msg }

// forwardUpdate sends r, signed with key, over TCP to the members of s in
// order of liveness. Only a connection that could not be made moves on to
// the next member: once the update is sent, no answer is an error, since
// it may or may not have been applied.
func (c *Craftroute) forwardUpdate(ctx context.Context, s *Shard, r *dns.Msg, key, alg, secret string) (*dns.Msg, *updateError) {
	m := r.Copy()
	if t := m.IsTsig(); t != nil {
		m.Extra = m.Extra[:len(m.Extra)-1]
	}
	m.SetTsig(key, alg, tsigFudge, time.Now().Unix())
	cl := &dns.Client{
		Net:          "tcp",
		DialTimeout:  c.cfg.timeout,
		WriteTimeout: updateTimeout,
		ReadTimeout:  updateTimeout,
		TsigSecret:   map[string]string{key: secret},
	}
	var lastErr error
	for _, mem := range s.Order(time.Now(), nil) {
		if ctx.Err() != nil {
			break
		}
		conn, err := cl.DialContext(ctx, mem.Addr)
		if err != nil {
			mem.Failed(time.Now(), c.cfg.downFor)
			lastErr = fmt.Errorf("member %s: %w", mem.Addr, err)
			continue
		}
		fctx, cancel := context.WithTimeout(ctx, updateTimeout)
		resp, _, err := cl.ExchangeWithConnContext(fctx, m, conn)
		cancel()
		conn.Close()
		if err != nil {
			mem.Failed(time.Now(), c.cfg.downFor)
			return nil, &updateError{ede: dns.ExtendedErrorCodeOther, sent: true,
				msg: fmt.Sprintf("shard %s member %s: %v: the update may or may not have been applied", s.Name, mem.Addr, err)}
		}
		mem.Succeeded(time.Now())
		return resp, nil
	}
	if lastErr == nil {
		lastErr = fmt.Errorf("no members")
	}
	return nil, &updateError{ede: dns.ExtendedErrorCodeNoReachableAuthority,
		msg: fmt.Sprintf("shard %s: no member reachable, nothing sent: %v", s.Name, lastErr)}
}
