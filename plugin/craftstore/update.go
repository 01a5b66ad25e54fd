package craftstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/tsig"

	"github.com/craftdns/craftdns/internal/ede"
	"github.com/craftdns/craftdns/internal/shardmap"
	"github.com/craftdns/craftdns/internal/shardproto"
	"github.com/craftdns/craftdns/internal/zoneapi"
	"github.com/craftdns/craftdns/plugin/craftstore/replica"

	"github.com/miekg/dns"
)

// defaultMaxUpdateRecords bounds the prerequisite and update sections of one
// UPDATE together.
const defaultMaxUpdateRecords = 1024

// allowRule authorizes a TSIG key to update some names and types, in the
// style of CoreDNS's dynupdate: NAME is an owner name, @ for the apex, * for
// every name in the zone, or *.SUFFIX for every name below SUFFIX; TYPE is a
// type, ANY (deleting every RRset at a name) or * (everything).
type allowRule struct {
	key   string
	name  string
	types map[uint16]bool // nil: every type
}

func parseAllow(args []string) (allowRule, error) {
	if len(args) < 3 {
		return allowRule{}, fmt.Errorf("allow KEY NAME TYPE [TYPE...]")
	}
	r := allowRule{key: dns.CanonicalName(args[0]), name: args[1]}
	if r.name != "@" && r.name != "*" {
		r.name = strings.ToLower(r.name)
		if _, ok := dns.IsDomainName(strings.TrimPrefix(r.name, "*.")); !ok {
			return allowRule{}, fmt.Errorf("allow: %q is not a name", args[1])
		}
	}
	for _, t := range args[2:] {
		if t == "*" {
			if len(args) != 3 {
				return allowRule{}, fmt.Errorf("allow: * must be the only type")
			}
			return r, nil
		}
		qt, ok := dns.StringToType[strings.ToUpper(t)]
		if !ok {
			return allowRule{}, fmt.Errorf("allow: unknown type %q", t)
		}
		if r.types == nil {
			r.types = map[uint16]bool{}
		}
		r.types[qt] = true
	}
	return r, nil
}

// permits reports whether the rule lets key write name/qtype in zone.
func (r allowRule) permits(zone, key, name string, qtype uint16) bool {
	if r.key != key {
		return false
	}
	if r.types != nil && !r.types[qtype] {
		return false
	}
	name = strings.ToLower(dns.Fqdn(name))
	switch {
	case r.name == "*":
		return true
	case r.name == "@":
		return name == zone
	case strings.HasPrefix(r.name, "*."):
		suffix := dns.Fqdn(strings.TrimPrefix(r.name, "*."))
		if !strings.HasSuffix(suffix, zone) {
			suffix = dns.Fqdn(strings.TrimPrefix(r.name, "*.") + "." + zone)
		}
		return name != suffix && dns.IsSubDomain(suffix, name)
	}
	n := dns.Fqdn(r.name)
	if !dns.IsSubDomain(zone, n) {
		n = dns.Fqdn(r.name + "." + zone)
	}
	return name == n
}

// serveUpdate handles an RFC 2136 UPDATE: the state-independent checks here,
// then the whole message as one replicated entry.
func (c *Craftstore) serveUpdate(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	if len(r.Question) != 1 || r.Question[0].Qtype != dns.TypeSOA || r.Question[0].Qclass != dns.ClassINET {
		return ede.Write(w, r, dns.RcodeFormatError, dns.ExtendedErrorCodeOther, "the zone section must hold one SOA question of class IN")
	}
	origin := dns.CanonicalName(r.Question[0].Name)
	if plugin.Zones(c.Zones).Matches(origin) == "" || c.rep.Load() != nil && c.rep.Load().Zone(origin) == nil {
		if c.Fall.Through(origin) {
			return plugin.NextOrFailure(c.Name(), c.Next, ctx, w, r)
		}
		// RFC 2136 §3.1.1: not authoritative for the zone.
		return ede.Write(w, r, dns.RcodeNotAuth, dns.ExtendedErrorCodeNotAuthoritative, "no such zone here")
	}
	rep := c.rep.Load()
	if rep == nil {
		return ede.Write(w, r, dns.RcodeServerFailure, dns.ExtendedErrorCodeNotReady, "member is starting")
	}
	key, ok := tsig.ValidatedKeyName(ctx)
	if !ok && len(c.cfg.allow) > 0 {
		return ede.Write(w, r, dns.RcodeRefused, dns.ExtendedErrorCodeProhibited, "UPDATE needs a valid TSIG signature")
	}
	if rcode, code, why := c.checkUpdate(origin, key, r.Answer, r.Ns); rcode != dns.RcodeSuccess {
		return ede.Write(w, r, rcode, code, why)
	}

	// A router's UPDATE carries the epoch of its map: refused, now or when
	// applied, if names are placed differently since (fence.go).
	epoch, _ := shardproto.RoutedEpoch(r)
	p := rep.Placement()
	if epoch != 0 && p.FenceWrite(epoch) == shardmap.Fenced {
		return c.writeFenced(w, r, p, p.FencedText(epoch))
	}

	names := make([]string, len(r.Ns))
	for i, rr := range r.Ns {
		names[i] = rr.Header().Name
	}
	wctx, cancel := context.WithTimeout(lateNotice(ctx, c.leases.Load(), rep, origin, shardproto.Records, names...), c.cfg.timeout)
	defer cancel()
	rcode, _, err := rep.Update(replica.WithEpoch(wctx, epoch), origin, r.Answer, r.Ns)
	if errors.Is(err, replica.ErrStaleMap) {
		return c.writeFenced(w, r, rep.Placement(), err.Error())
	}
	if err != nil {
		log.Warningf("UPDATE for %s: %v", origin, err)
		rcode, code := updateFailure(err)
		return ede.Write(w, r, rcode, code, err.Error())
	}
	if rcode == dns.RcodeSuccess {
		noticeChange(ctx, c.leases.Load(), rep, origin, shardproto.Records, names...)
	}
	return ede.Write(w, r, rcode, 0, "")
}

// writeFenced refuses router UPDATE r, routed by a map older than the
// placement of p, with why.
func (c *Craftstore) writeFenced(w dns.ResponseWriter, r *dns.Msg, p *shardmap.Place, why string) (int, error) {
	w.WriteMsg(fencedReply(r, p, why))
	return dns.RcodeSuccess, nil
}

// checkUpdate makes the checks of an UPDATE of zone origin signed with key
// that come before its prerequisites: updates enabled, size, form (RFC 2136
// §3.4.1), the allow rules, and that its additions do not take the zone, as
// this member holds it, over max_zone_records. The UPDATE path and the
// transaction parts the routers send (txnapi.go) both make them. It returns
// NOERROR, or the rcode, Extended DNS Error code and text that refuse it.
func (c *Craftstore) checkUpdate(origin, key string, prereq, updates []dns.RR) (int, uint16, string) {
	if len(c.cfg.allow) == 0 {
		return dns.RcodeRefused, dns.ExtendedErrorCodeProhibited, "updates are not enabled (no allow rules)"
	}
	if n := len(prereq) + len(updates); n > c.cfg.maxUpdate {
		return dns.RcodeRefused, dns.ExtendedErrorCodeOther, fmt.Sprintf("%d records in one UPDATE, at most %d", n, c.cfg.maxUpdate)
	}
	if rcode, why := replica.CheckUpdate(origin, prereq, updates); rcode != dns.RcodeSuccess {
		return rcode, dns.ExtendedErrorCodeOther, why
	}
	for _, rr := range updates {
		h := rr.Header()
		if !c.permits(origin, key, h.Name, h.Rrtype) {
			return dns.RcodeRefused, dns.ExtendedErrorCodeProhibited,
				fmt.Sprintf("key %s may not update %s %s", key, h.Name, dns.TypeToString[h.Rrtype])
		}
	}
	adds := 0
	for _, rr := range updates {
		if rr.Header().Class == dns.ClassINET {
			adds++
		}
	}
	if rep := c.rep.Load(); rep != nil {
		if z := rep.Zone(origin); z != nil {
			if err := zoneapi.CheckGrowth(origin, z.Records(), adds, c.cfg.maxZone); err != nil {
				return dns.RcodeRefused, dns.ExtendedErrorCodeOther, err.Error()
			}
		}
	}
	return dns.RcodeSuccess, 0, ""
}

// updateFailure is the rcode and Extended DNS Error code that answer an
// UPDATE whose proposal failed with err (its kind, replica.Err...).
func updateFailure(err error) (int, uint16) {
	switch {
	case errors.Is(err, replica.ErrNotFound): // the zone was deleted meanwhile
		return dns.RcodeNotAuth, dns.ExtendedErrorCodeNotAuthoritative
	case errors.Is(err, replica.ErrInvalid), errors.Is(err, replica.ErrTooLarge):
		return dns.RcodeFormatError, dns.ExtendedErrorCodeOther
	case errors.Is(err, replica.ErrWrongShard):
		// A name of another shard, or of every shard (sent to a member,
		// not through a router): not this server's to change alone.
		return dns.RcodeRefused, dns.ExtendedErrorCodeNotAuthoritative
	case errors.Is(err, replica.ErrConflict):
		return dns.RcodeRefused, dns.ExtendedErrorCodeOther
	case errors.Is(err, replica.ErrNotReady):
		// Nothing was proposed: craftroute sends the UPDATE to another
		// member (and a client may).
		return dns.RcodeServerFailure, dns.ExtendedErrorCodeNotReady
	}
	// Unavailable (no leader, no quorum in time: it may still be applied)
	// or a failure of this member.
	return dns.RcodeServerFailure, dns.ExtendedErrorCodeNoReachableAuthority
}

func (c *Craftstore) permits(zone, key, name string, qtype uint16) bool {
	for _, rule := range c.cfg.allow {
		if rule.permits(zone, key, name, qtype) {
			return true
		}
	}
	return false
}
