package craftroute

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/ede"
	"github.com/craftdns/craftdns/internal/shardproto"
	"github.com/craftdns/craftdns/internal/zoneapi"

	"github.com/miekg/dns"
)

// The layout of a zone over the shards in key mode "name" (package
// partition): every shard holds the apex RRsets, every delegation (the NS
// RRset at a zone cut and the DS beside it), every name at or below a cut
// (glue, occluded names) and every DNAME RRset (RFC 6672); any other name
// lives only on the shard the ring gives its canonical owner name, name
// servers of delegations named outside their cut included: the router adds
// their addresses to referrals (resolve.go), so that no copy of them can go
// stale. In key mode "zone" the whole zone lives on the shard of its
// origin.
//
// A DNAME on every shard makes every name below its owner, whichever shard
// the ring gives it, answered by that shard alone (the substitution is
// final: no other shard is asked), and lets every shard refuse data below a
// DNAME and a DNAME above data, as one server does (craftstore). The
// DNAME's owner keeps its other RRsets on its own shard.

// cutQueryParallel bounds the concurrent partition-mode queries that place
// the names of one change.
const cutQueryParallel = 16

// zoneShard returns the shard of zone origin (canonical) in key mode "zone".
func (c *Craftroute) zoneShard(origin string) *Shard {
	rt := c.routes()
	return rt.shard(rt.ring.Locate(origin))
}

// split places the records of zone origin (canonical) on the shards: in key
// mode "zone" all on the zone's shard, in key mode "name" by the layout
// above, the cuts being the owners of the NS RRsets below the apex in rrs.
// Every record is placed at least once; a zone with its SOA gives every
// shard of key mode "name" a part.
func (c *Craftroute) split(origin string, rrs []dns.RR) map[*Shard][]dns.RR {
	if c.keyMode() == keyZone {
		return map[*Shard][]dns.RR{c.zoneShard(origin): rrs}
	}
	cuts := cutSet(origin, rrs)
	parts := make(map[*Shard][]dns.RR, len(c.shards()))
	for _, rr := range rrs {
		name := dnsname.Lower(rr.Header().Name)
		if name == origin || rr.Header().Rrtype == dns.TypeDNAME || underCut(origin, name, cuts) {
			for _, s := range c.shards() {
				parts[s] = append(parts[s], rr)
			}
			continue
		}
		s := c.shardFor(name)
		parts[s] = append(parts[s], rr)
	}
	return parts
}

// cutSet returns the zone cuts of origin in rrs: the canonical owners of NS
// records below the apex.
func cutSet(origin string, rrs []dns.RR) map[string]bool {
	cuts := map[string]bool{}
	for _, rr := range rrs {
		if ns, ok := rr.(*dns.NS); ok {
			if name := dnsname.Lower(ns.Hdr.Name); name != origin && dns.IsSubDomain(origin, name) {
				cuts[name] = true
			}
		}
	}
	return cuts
}

// underCut reports whether canonical name is at or below one of cuts; the
// origin and the names above it are never cuts.
func underCut(origin, name string, cuts map[string]bool) bool {
	if len(cuts) == 0 {
		return false
	}
	for off, end := 0, false; !end; off, end = dns.NextLabel(name, off) {
		n := name[off:]
		if len(n) <= len(origin) {
			return false
		}
		if cuts[n] {
			return true
		}
	}
	return false
}

// zoneText writes rrs as zone file text, one record per line.
func zoneText(rrs []dns.RR) []byte {
	var b strings.Builder
	for _, rr := range rrs {
		b.WriteString(rr.String())
		b.WriteByte('\n')
	}
	return []byte(b.String())
}

// errZoneAbsent is returned by placer when a shard does not hold the zone.
var errZoneAbsent = errors.New("zone not found")

// placer decides which shards a change to one zone reaches in key mode
// "name": every shard for a name at the apex, an NS, DS or DNAME record, a
// name at or below a zone cut, the cut existing or made by the change
// itself, and the removal of every RRset at a name that holds a DNAME; else
// the owner shard of the name. Whether an existing cut covers a name, and
// whether it holds a DNAME, is asked of the name's owner shard in partition
// mode: every shard holds every delegation and every DNAME.
type placer struct {
	c       *Craftroute
	origin  string
	newCuts map[string]bool // names the change gives an NS record

	mu    sync.Mutex
	known map[string]nameFacts // what the name's owner shard said of it
}

func newPlacer(c *Craftroute, origin string) *placer {
	return &placer{c: c, origin: origin, newCuts: map[string]bool{}, known: map[string]nameFacts{}}
}

// addNS notes an NS record the change adds: below the apex it makes a cut.
func (p *placer) addNS(ns *dns.NS) {
	name := dnsname.Lower(ns.Hdr.Name)
	if name == p.origin || !dns.IsSubDomain(p.origin, name) {
		return
	}
	p.newCuts[name] = true
}

// local reports whether the name/rrtype placement needs no query: the
// second result is then whether every shard holds it.
func (p *placer) local(name string, rrtype uint16) (every, known bool) {
	switch {
	case name == p.origin, rrtype == dns.TypeNS, rrtype == dns.TypeDS, rrtype == dns.TypeDNAME, underCut(p.origin, name, p.newCuts):
		return true, true
	case len(p.c.shards()) == 1 || !dns.IsSubDomain(p.origin, name):
		return false, true // one shard, or a name the shard will reject
	}
	return false, false
}

// placement is a name and type of a change to place.
type placement struct {
	name   string // canonical
	rrtype uint16 // dns.TypeANY: every RRset at the name
}

// resolve asks, concurrently, the owner shards of the names of items that
// local cannot place whether existing cuts cover them and whether they hold
// a DNAME.
func (p *placer) resolve(ctx context.Context, items []placement) error {
	var todo []string
	seen := map[string]bool{}
	for _, it := range items {
		if _, known := p.local(it.name, it.rrtype); known || seen[it.name] {
			continue
		}
		seen[it.name] = true
		todo = append(todo, it.name)
	}
	errs := make([]error, len(todo))
	sem := make(chan struct{}, cutQueryParallel)
	var wg sync.WaitGroup
	for i, n := range todo {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			f, err := p.c.probeName(ctx, p.origin, n)
			if err != nil {
				errs[i] = err
				return
			}
			p.mu.Lock()
			p.known[n] = f
			p.mu.Unlock()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// shards returns the shards a change at canonical name of rrtype reaches
// (dns.TypeANY for a deletion of every RRset at name); resolve must have
// been given it.
func (p *placer) shards(name string, rrtype uint16) []*Shard {
	every, known := p.local(name, rrtype)
	if !known {
		p.mu.Lock()
		f := p.known[name]
		p.mu.Unlock()
		every = f.belowCut || f.dname && rrtype == dns.TypeANY
	}
	if every {
		return p.c.shards()
	}
	return []*Shard{p.c.shardFor(name)}
}

// nameFacts is what a name's owner shard says of it (probeName).
type nameFacts struct {
	belowCut bool // a zone cut covers the name: it is at or below the cut
	dname    bool // the name owns a DNAME RRset
}

// coveredByCut reports whether a zone cut of origin covers canonical name
// (probeName).
func (c *Craftroute) coveredByCut(ctx context.Context, origin, name string) (bool, error) {
	f, err := c.probeName(ctx, origin, name)
	return f.belowCut, err
}

// probeName asks the owner shard of canonical name in zone origin, in
// partition mode, for the name's DNAME: a Final, non-authoritative answer
// with an NS RRset below the apex in the authority section is a referral
// (a cut covers the name; an answer from a zone below origin also counts:
// origin delegates it), an answer holding a DNAME RRset owned by the name
// says it holds one.
func (c *Craftroute) probeName(ctx context.Context, origin, name string) (nameFacts, error) {
	s := c.shardFor(name)
	q := new(dns.Msg)
	q.Id = dns.Id()
	q.Question = []dns.Question{{Name: name, Qtype: dns.TypeDNAME, Qclass: dns.ClassINET}}
	shardproto.Request(q)
	resp, err := c.exchange(ctx, s, q, true)
	if err != nil {
		return nameFacts{}, &errNoShard{s.Name, err}
	}
	facts, err := shardproto.Parse(resp)
	switch {
	case err != nil && resp.Rcode == dns.RcodeRefused, err == nil && facts.Origin == "":
		return nameFacts{}, fmt.Errorf("shard %s: %w: %s", s.Name, errZoneAbsent, origin)
	case err != nil && resp.Rcode == dns.RcodeServerFailure:
		why := "no member could answer"
		if e := ede.Of(resp); e != nil && e.ExtraText != "" {
			why = e.ExtraText
		}
		return nameFacts{}, &errNoShard{s.Name, errors.New(why)}
	case err != nil:
		return nameFacts{}, fmt.Errorf("shard %s: %w", s.Name, err)
	case facts.Origin != origin:
		if dns.IsSubDomain(origin, facts.Origin) {
			return nameFacts{belowCut: true}, nil
		}
		return nameFacts{}, fmt.Errorf("shard %s: %w: %s", s.Name, errZoneAbsent, origin)
	case facts.Kind != shardproto.Final:
		return nameFacts{}, nil
	case resp.Authoritative:
		for _, rr := range resp.Answer {
			if rr.Header().Rrtype == dns.TypeDNAME && equalNames(rr.Header().Name, name) {
				return nameFacts{dname: true}, nil
			}
		}
		return nameFacts{}, nil
	}
	for _, rr := range resp.Ns {
		owner := dnsname.Lower(rr.Header().Name)
		if rr.Header().Rrtype == dns.TypeNS && owner != origin && dns.IsSubDomain(owner, name) {
			return nameFacts{belowCut: true}, nil
		}
	}
	return nameFacts{}, nil
}

// checkNewCuts refuses (409) a change that makes a zone cut at a name that
// already holds data or has names below it, unless a cut covers the name
// already: those names live on their own shards, and a cut needs them on
// every shard (a zone PUT lays them out so).
func (c *Craftroute) checkNewCuts(ctx context.Context, origin string, cuts map[string]bool) error {
	for name := range cuts {
		covered, err := c.coveredByCut(ctx, origin, name)
		if err != nil {
			return err
		}
		if covered {
			continue
		}
		for _, s := range c.shards() {
			q := new(dns.Msg)
			q.Question = []dns.Question{{Name: name, Qtype: dns.TypeNS, Qclass: dns.ClassINET}}
			shardproto.Request(q)
			resp, err := c.exchange(ctx, s, q, false)
			if err != nil {
				return &errNoShard{s.Name, err}
			}
			if f, err := shardproto.Parse(resp); err == nil && f.Kind == shardproto.Final && f.Origin == origin {
				return zoneapi.Errorf(http.StatusConflict, "%s holds records or has names below it (on shard %s): "+
					"in key mode name a delegation over existing names needs the zone imported again (PUT)", name, s.Name)
			}
		}
	}
	return nil
}

// byName returns shards sorted by name.
func byName(shards []*Shard) []*Shard {
	out := append([]*Shard(nil), shards...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
