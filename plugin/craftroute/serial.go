package craftroute

import (
	"sync"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/zoneapi"

	"github.com/miekg/dns"
)

// serials presents one SOA serial per zone in key mode "name", where each
// shard keeps its own: a change bumps the serial of the shard that took it.
// The router answers with the highest serial it has seen from any shard of
// the zone (RFC 1982 order): in SOA answers and in the authority section of
// negative answers, whichever shard answered. It learns serials from every
// SOA that passes through it and from the shards' zone lists (zone
// discovery), so it only grows.
// The zero value is ready to use.
type serials struct {
	mu sync.RWMutex
	m  map[string]uint32 // canonical zone → highest serial seen
}

// observe notes serial for origin and returns the highest serial known.
func (s *serials) observe(origin string, serial uint32) uint32 {
	s.mu.RLock()
	cur, ok := s.m[origin]
	s.mu.RUnlock()
	if ok && !zoneapi.SerialAfter(serial, cur) {
		return cur
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.m[origin]; ok && !zoneapi.SerialAfter(serial, cur) {
		return cur
	}
	if s.m == nil {
		s.m = map[string]uint32{}
	}
	s.m[origin] = serial
	return serial
}

// present rewrites the serial of the SOA records in m (an SOA is always at
// its zone's apex) to the highest known for their zone, noting theirs first.
// m's records must be its own (unpacked), not shared.
func (s *serials) present(m *dns.Msg) {
	for _, sec := range [][]dns.RR{m.Answer, m.Ns} {
		for _, rr := range sec {
			if soa, ok := rr.(*dns.SOA); ok {
				soa.Serial = s.observe(dnsname.Lower(soa.Hdr.Name), soa.Serial)
			}
		}
	}
}
