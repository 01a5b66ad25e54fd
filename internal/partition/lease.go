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
// carrying the option in lease mode (the router's DNS port, the duration
// and a random token). A member that acknowledges a write (a record
// change, an UPDATE, a zone created, replaced or deleted) first sends a
// NOTIFY (RFC 1996) to every router whose lease has not expired, at the
// lease query's source address and the port it named; its question is the
// lease query's (a name the router serves, so that its server takes it)
// and the option in notify mode carries the token, the zone and what
// changed. The member waits until each router answered or its lease
// expired. A router answers the NOTIFY once it has dropped what the change
// may make stale; it takes only notices carrying its token.
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

// TokenLen is the length of a lease's token.
const TokenLen = 8

// Lease is what a router asks a member for.
type Lease struct {
	Port     uint16         // the router's DNS port, where notices go
	Duration time.Duration  // capped at MaxLease by LeaseRequested
	Token    [TokenLen]byte // random, per router run: notices carry it back
}

// RequestLease adds the option in lease mode to query m: the sender asks
// for change notices to its DNS port, naming m's question (a name of its
// zones, so that its server takes them), for l.Duration. The token comes
// back in every notice: the router takes only notices that carry it, so
// that only a member it asked can make it drop what it knows.
func RequestLease(m *dns.Msg, l Lease) {
	opt := m.IsEdns0()
	if opt == nil {
		m.SetEdns0(dns.DefaultMsgSize, false)
		opt = m.IsEdns0()
	}
	data := []byte{version, modeLease, 0}
	data = binary.BigEndian.AppendUint16(data, l.Port)
	data = binary.BigEndian.AppendUint32(data, uint32(l.Duration/time.Millisecond))
	data = append(data, l.Token[:]...)
	opt.Option = append(opt.Option, &dns.EDNS0_LOCAL{Code: Code, Data: data})
}

// LeaseRequested returns the lease that query r asks for; ok is false when
// r is not a lease request. The duration is capped at MaxLease.
func LeaseRequested(r *dns.Msg) (l Lease, ok bool) {
	p, found := payload(r)
	if !found || len(p) < 9+TokenLen || p[1] != modeLease {
		return Lease{}, false
	}
	l.Port = binary.BigEndian.Uint16(p[3:5])
	l.Duration = min(time.Duration(binary.BigEndian.Uint32(p[5:9]))*time.Millisecond, MaxLease)
	copy(l.Token[:], p[9:9+TokenLen])
	return l, l.Port != 0 && l.Duration > 0
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

// Notice is a change notice: the zone, what changed and, for Records, the
// owner names (none: every name of the zone).
type Notice struct {
	Zone   string
	Change Change
	Names  []string
	// Index is the applied index of the member that took the write, once
	// it applied it (index.go).
	Index uint64
	// Serial and Base are the zone's serial and serial base on the shard
	// after the write (serial.go); zero for a deleted zone.
	Serial, Base uint32
}

// Msg returns the NOTIFY carrying n to the router that asked for lease l
// with a query for qname: its question is qname (so that the router's
// server takes it whatever the zone), and the option holds the lease's
// token, the change, the zone and the names, unless there are too many:
// then the notice is about every name of the zone.
func (n Notice) Msg(qname string, l Lease) *dns.Msg {
	m := new(dns.Msg)
	m.SetNotify(dns.Fqdn(qname))
	m.SetEdns0(dns.DefaultMsgSize, false)
	data := []byte{version, modeNotify, byte(n.Change)}
	data = append(data, l.Token[:]...)
	data = binary.BigEndian.AppendUint64(data, n.Index)
	data = binary.BigEndian.AppendUint32(data, n.Serial)
	data = binary.BigEndian.AppendUint32(data, n.Base)
	buf := make([]byte, 256)
	k, err := dns.PackDomainName(dns.Fqdn(n.Zone), buf, 0, nil, false)
	if err != nil {
		k, buf = 1, []byte{0} // the root: every name
	}
	data = append(data, buf[:k]...)
	if n.Change == Records && len(n.Names) <= maxNoticeNames {
		list := data
		for _, name := range n.Names {
			k, err := dns.PackDomainName(dns.Fqdn(name), buf, 0, nil, false)
			if err != nil || len(list)+k > maxNoticeBytes {
				list = data
				break
			}
			list = append(list, buf[:k]...)
		}
		data = list
	}
	m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_LOCAL{Code: Code, Data: data})
	return m
}

// NoticeOf returns the notice that message r carries and its token; ok is
// false when r is not a NOTIFY carrying the option in notify mode, or the
// option is malformed.
func NoticeOf(r *dns.Msg) (n Notice, token [TokenLen]byte, ok bool) {
	if r.Opcode != dns.OpcodeNotify || len(r.Question) != 1 {
		return Notice{}, token, false
	}
	p, found := payload(r)
	const head = 3 + TokenLen + 8 + 8 // mode, change, token, index, serial, base
	if !found || len(p) < head+1 || p[1] != modeNotify {
		return Notice{}, token, false
	}
	n.Change = Change(p[2])
	if n.Change != Records && n.Change != ZonePut && n.Change != ZoneDeleted {
		return Notice{}, token, false
	}
	copy(token[:], p[3:3+TokenLen])
	n.Index = binary.BigEndian.Uint64(p[3+TokenLen:])
	n.Serial = binary.BigEndian.Uint32(p[3+TokenLen+8:])
	n.Base = binary.BigEndian.Uint32(p[3+TokenLen+12:])
	zone, off, err := dns.UnpackDomainName(p, head)
	if err != nil {
		return Notice{}, token, false
	}
	n.Zone = zone
	for off < len(p) {
		name, next, err := dns.UnpackDomainName(p, off)
		if err != nil || next <= off {
			return Notice{}, token, false
		}
		n.Names = append(n.Names, name)
		off = next
	}
	return n, token, true
}
