package partition

import (
	"encoding/binary"
	"time"

	"github.com/miekg/dns"
)

// Change leases: how every router learns of a write before it is
// acknowledged.
//
// A router keeps merged negative answers in a cache and, in key mode
// "zone", a set of the zones that exist. Both must follow every write at
// once, whichever router or member took it. So a router holds a lease on
// every shard member, renewed a few times per lease duration with a query
// carrying the option in lease mode (the router's DNS port and the
// duration). A member that acknowledges a write (a record change, an
// UPDATE, a zone created, replaced or deleted) first sends a NOTIFY (RFC
// 1996) for the zone, carrying the option in notify mode with what
// changed, to every router whose lease has not expired, at the lease
// query's source address and the port it named, and waits until each
// answered or its lease expired. A router answers the NOTIFY once it has
// dropped what the change may make stale.
//
// A router trusts its cache only while it holds an unexpired lease on
// every member: it counts a lease from when it sent the request, and the
// member from when it received it, so the member never stops notifying a
// router that still trusts its lease. A member that starts waits one
// maximum lease duration before acknowledging a write, for leases a
// previous run of it granted.

// MaxLease bounds the lease duration a member grants.
const MaxLease = 3 * time.Second

const (
	modeLease  = 3 // a lease request (a query)
	modeNotify = 4 // a change notice (a NOTIFY)
)

// RequestLease adds the option in lease mode to query m: the sender asks
// for change notices to its DNS port for duration d.
func RequestLease(m *dns.Msg, port uint16, d time.Duration) {
	opt := m.IsEdns0()
	if opt == nil {
		m.SetEdns0(dns.DefaultMsgSize, false)
		opt = m.IsEdns0()
	}
	data := []byte{version, modeLease, 0}
	data = binary.BigEndian.AppendUint16(data, port)
	data = binary.BigEndian.AppendUint32(data, uint32(d/time.Millisecond))
	opt.Option = append(opt.Option, &dns.EDNS0_LOCAL{Code: Code, Data: data})
}

// LeaseRequested returns the port and duration of lease request r; ok is
// false when r is not one. The duration is capped at MaxLease.
func LeaseRequested(r *dns.Msg) (port uint16, d time.Duration, ok bool) {
	p, found := payload(r)
	if !found || len(p) < 9 || p[1] != modeLease {
		return 0, 0, false
	}
	port = binary.BigEndian.Uint16(p[3:5])
	d = min(time.Duration(binary.BigEndian.Uint32(p[5:9]))*time.Millisecond, MaxLease)
	return port, d, port != 0 && d > 0
}

// Change says what a notice is about.
type Change uint8

const (
	// Records: records of the zone changed.
	Records Change = 1
	// ZonePut: the zone was created or replaced.
	ZonePut Change = 2
	// ZoneDeleted: the zone was deleted.
	ZoneDeleted Change = 3
)

func (c Change) String() string {
	switch c {
	case Records:
		return "records"
	case ZonePut:
		return "zone put"
	case ZoneDeleted:
		return "zone deleted"
	}
	return "unknown"
}

// maxNoticeNames and maxNoticeBytes bound the names a notice lists; a
// change of more names is notified for the whole zone.
const (
	maxNoticeNames = 32
	maxNoticeBytes = 1024
)

// Notice returns the NOTIFY for change c of zone. For Records it lists the
// owner names that changed, unless there are too many: then, as for the
// other changes, the notice is about every name of the zone.
func Notice(zone string, c Change, names []string) *dns.Msg {
	m := new(dns.Msg)
	m.SetNotify(dns.Fqdn(zone))
	m.SetEdns0(dns.DefaultMsgSize, false)
	data := []byte{version, modeNotify, byte(c)}
	if c == Records && len(names) <= maxNoticeNames {
		buf := make([]byte, 256)
		list := data
		for _, name := range names {
			n, err := dns.PackDomainName(dns.Fqdn(name), buf, 0, nil, false)
			if err != nil || len(list)+n > maxNoticeBytes {
				list = data
				break
			}
			list = append(list, buf[:n]...)
		}
		data = list
	}
	m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_LOCAL{Code: Code, Data: data})
	return m
}

// NoticeOf returns the zone, change and names of notice r (no names: every
// name of the zone); ok is false when r is not a NOTIFY carrying the option
// in notify mode, or the option is malformed.
func NoticeOf(r *dns.Msg) (zone string, c Change, names []string, ok bool) {
	if r.Opcode != dns.OpcodeNotify || len(r.Question) != 1 {
		return "", 0, nil, false
	}
	p, found := payload(r)
	if !found || len(p) < 3 || p[1] != modeNotify {
		return "", 0, nil, false
	}
	c = Change(p[2])
	if c != Records && c != ZonePut && c != ZoneDeleted {
		return "", 0, nil, false
	}
	for off := 3; off < len(p); {
		name, next, err := dns.UnpackDomainName(p, off)
		if err != nil || next <= off {
			return "", 0, nil, false
		}
		names = append(names, name)
		off = next
	}
	return r.Question[0].Name, c, names, true
}
