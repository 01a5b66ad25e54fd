package craftroute

import (
	"context"
	"sync"
	"time"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/zonerules"

	"github.com/miekg/dns"
)

// serials presents one SOA serial per zone in key mode "name", where each
// shard keeps its own (internal/shardproto/serial.go). A shard's serial is
// its serial base (the serial the zone was last given explicitly: an
// import, or an SOA record written with a newer serial) plus the changes it
// took since. The router presents
//
//	zone serial = highest base + Σ over the shards (serial − base)
//
// in RFC 1982 arithmetic: every change on any shard raises it, and routers
// that know the same shard states present the same serial. It learns the
// shards' serials from the members' routed answers that carry an SOA or
// partition-mode facts (Craftroute.exchange) and from change notices,
// which every member sends before it acknowledges a write (lease.go).
// Before it presents a serial it asks the shards it has not heard from,
// and, unless it holds its leases (then every change reached it), every
// shard that did not answer during this resolution (Craftroute.zoneSerial).
// What a router presented for a zone never goes back, also when a shard's
// base is lowered by hand; a deleted zone starts again.
// The zero value is ready to use.
type serials struct {
	mu sync.Mutex
	m  map[string]*zoneSerials // canonical zone → its shards' serials
}

type zoneSerials struct {
	shards map[string]shardSerial // shard name → the newest state heard of
	shown  uint32                 // the highest serial presented, when presented
	showed bool
}

// shardSerial is a shard's serial and base for a zone, and when the router
// last heard of them.
type shardSerial struct {
	serial, base uint32
	at           time.Time
}

// newer reports whether (serial, base) is a later state of a shard than cur:
// a newer base, or the same base and a newer serial.
func (cur shardSerial) newer(serial, base uint32) bool {
	if base != cur.base {
		return zonerules.SerialAfter(base, cur.base)
	}
	return zonerules.SerialAfter(serial, cur.serial)
}

// observe notes that shard holds zone (canonical) at serial with base.
func (s *serials) observe(zone, shard string, serial, base uint32, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]*zoneSerials{}
	}
	z := s.m[zone]
	if z == nil {
		z = &zoneSerials{shards: map[string]shardSerial{}}
		s.m[zone] = z
	}
	cur, ok := z.shards[shard]
	if !ok || cur.newer(serial, base) {
		cur.serial, cur.base = serial, base
	}
	if at.After(cur.at) {
		cur.at = at
	}
	z.shards[shard] = cur
}

// forget drops what is known of zone: it was deleted.
func (s *serials) forget(zone string) {
	s.mu.Lock()
	delete(s.m, zone)
	s.mu.Unlock()
}

// missingLocked returns the shards (of all) whose serial for zone is
// unknown, or was last heard of before since (when since is not zero).
func (s *serials) missingLocked(zone string, all []*Shard, since time.Time) []*Shard {
	var out []*Shard
	z := s.m[zone]
	for _, sh := range all {
		var cur shardSerial
		ok := false
		if z != nil {
			cur, ok = z.shards[sh.Name]
		}
		if !ok || (!since.IsZero() && cur.at.Before(since)) {
			out = append(out, sh)
		}
	}
	return out
}

// current is serial when no shard is missing (one lock, the common case);
// otherwise it returns the shards to ask first.
func (s *serials) current(zone string, all []*Shard, since time.Time) (serial uint32, ok bool, ask []*Shard) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ask = s.missingLocked(zone, all, since); len(ask) > 0 {
		return 0, false, ask
	}
	serial, ok = s.serialLocked(zone)
	return serial, ok, nil
}

// serial returns the serial to present for zone, or false when no shard's
// is known: the highest base plus every known shard's changes since its
// base, and never below what was presented before.
func (s *serials) serial(zone string) (uint32, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.serialLocked(zone)
}

func (s *serials) serialLocked(zone string) (uint32, bool) {
	z := s.m[zone]
	if z == nil || len(z.shards) == 0 {
		return 0, false
	}
	var sum serialSum
	for _, sh := range z.shards {
		sum.add(sh)
	}
	serial := sum.value()
	if z.showed && !zonerules.SerialAfter(serial, z.shown) {
		return z.shown, true
	}
	z.shown, z.showed = serial, true
	return serial, true
}

// serialSum adds up the zone serial of shards' states: the highest base
// plus every shard's changes since its base, in RFC 1982 arithmetic. The
// zero value holds no state; it allocates nothing (the query path uses it).
type serialSum struct {
	base, changes uint32
	any           bool
}

func (s *serialSum) add(sh shardSerial) {
	if !s.any || zonerules.SerialAfter(sh.base, s.base) {
		s.base, s.any = sh.base, true
	}
	s.changes += sh.serial - sh.base // modulo 2^32
}

func (s serialSum) value() uint32 { return s.base + s.changes }

// zoneSerial returns the serial to present for zone (canonical), asking
// the shards whose serial the router does not know first, and, without
// leases, every shard not heard from since start (the resolution's start).
// It is false when no shard's serial is known.
func (c *Craftroute) zoneSerial(ctx context.Context, r *dns.Msg, zone string, start time.Time) (uint32, bool) {
	since := start
	if c.leases.valid(time.Now()) {
		since = time.Time{} // every change was notified
	}
	serial, ok, ask := c.soa.current(zone, c.shards(), since)
	if len(ask) == 0 {
		return serial, ok
	}
	var wg sync.WaitGroup
	for _, s := range ask {
		wg.Go(func() {
			// Craftroute.exchange notes the serial the member sends.
			c.exchange(ctx, s, query(r, zone, dns.TypeSOA), false) // the apex is on every shard
		})
	}
	wg.Wait()
	return c.soa.serial(zone)
}

// currentSerial returns zone's serial as the API reports it and as an import
// or an SOA write must exceed: zoneSerial, asking every shard not heard from
// since now unless the router holds its leases. ok is false when no shard
// holds the zone.
func (c *Craftroute) currentSerial(ctx context.Context, zone string) (uint32, bool) {
	r := new(dns.Msg)
	r.SetQuestion(zone, dns.TypeSOA)
	r.SetEdns0(dns.DefaultMsgSize, false)
	return c.zoneSerial(ctx, r, zone, time.Now())
}

// raiseSOA gives the SOA records among rrs a serial after current (RFC
// 1982) when theirs is not: as one server does, a zone imported again or
// an SOA written with a serial that is not newer still moves the zone's
// serial on. Every shard then takes the same serial as its base.
func raiseSOA(rrs []dns.RR, current uint32) {
	for _, rr := range rrs {
		if soa, ok := rr.(*dns.SOA); ok && !zonerules.SerialAfter(soa.Serial, current) {
			soa.Serial = current + 1
		}
	}
}

// present rewrites the serial of the SOA records in m (an SOA is always at
// its zone's apex) to the zone's serial (zoneSerial). m's records must be
// its own (unpacked), not shared. r is the client's query, start when the
// resolution began.
func (c *Craftroute) present(ctx context.Context, r, m *dns.Msg, start time.Time) {
	for _, sec := range [][]dns.RR{m.Answer, m.Ns} {
		for _, rr := range sec {
			if soa, ok := rr.(*dns.SOA); ok {
				if serial, ok := c.zoneSerial(ctx, r, dnsname.Lower(soa.Hdr.Name), start); ok {
					soa.Serial = serial
				}
			}
		}
	}
}
