package shardproto

import (
	"encoding/binary"

	"github.com/miekg/dns"
)

// One zone serial over shards. In key mode "name" every shard of a zone
// keeps its own SOA serial, which an import or an SOA record written with a
// newer serial sets (the serial base) and every other change raises by one.
// A member tells routers the serial and the base of a zone in its routed
// answers that concern the zone's serial (an SOA in any section, or partition
// mode facts) and in change notices (lease.go). A router adds up, over the
// shards, the changes each counted since its base, onto the highest base
// (RFC 1982): a change on any shard raises that serial, and routers that
// know the same shard states present the same serial.

// SerialCode is the EDNS0 option that carries a zone's serial and serial
// base on one member: serial (4 bytes), base (4 bytes), the zone's name in
// wire form (uncompressed).
const SerialCode uint16 = Code + 2

// AttachSerial adds zone's serial and base to response m, when m carries an
// OPT record.
func AttachSerial(m *dns.Msg, zone string, serial, base uint32) {
	opt := m.IsEdns0()
	if opt == nil {
		return
	}
	// One buffer for the option: the numbers, then the name packed behind
	// them (at most 255 bytes).
	data := make([]byte, 8+256)
	binary.BigEndian.PutUint32(data, serial)
	binary.BigEndian.PutUint32(data[4:], base)
	end, err := dns.PackDomainName(dns.Fqdn(zone), data, 8, nil, false)
	if err != nil {
		return
	}
	opt.Option = append(opt.Option, &dns.EDNS0_LOCAL{Code: SerialCode, Data: data[:end:end]})
}

// SerialOf returns the zone serial and base that response m carries; ok is
// false when it carries none or a malformed one.
func SerialOf(m *dns.Msg) (zone string, serial, base uint32, ok bool) {
	opt := m.IsEdns0()
	if opt == nil {
		return "", 0, 0, false
	}
	for _, o := range opt.Option {
		l, isLocal := o.(*dns.EDNS0_LOCAL)
		if !isLocal || l.Code != SerialCode || len(l.Data) < 9 {
			continue
		}
		zone, serial, base, ok := SerialData(l.Data)
		if !ok {
			return "", 0, 0, false
		}
		return ZoneName(zone), serial, base, true
	}
	return "", 0, 0, false
}

// SerialData reads d, the payload of a serial option: the zone's name in
// wire form (a slice of d; ZoneName makes it a string), its serial and
// its base. It allocates nothing.
func SerialData(d []byte) (zone []byte, serial, base uint32, ok bool) {
	if len(d) < 9 || !wireName(d[8:]) {
		return nil, 0, 0, false
	}
	return d[8:], binary.BigEndian.Uint32(d), binary.BigEndian.Uint32(d[4:]), true
}

// ZoneName returns the presentation form of name, a name in wire form as
// SerialData returns it.
func ZoneName(name []byte) string {
	s, _, err := dns.UnpackDomainName(name, 0)
	if err != nil {
		return ""
	}
	return s
}

// wireName reports whether b is exactly one uncompressed name in wire form.
func wireName(b []byte) bool {
	off := 0
	for off < len(b) && off < 255 {
		c := int(b[off])
		if c == 0 {
			return off == len(b)-1
		}
		if c > 63 {
			return false
		}
		off += c + 1
	}
	return false
}
