package shardproto

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
// carrying the option in lease mode (the router's DNS port, the duration,
// a random token and the time it asked), signed with the key routers and
// members share (auth.go); a member grants only signed requests, each
// token's in increasing time and within MaxSkew of its own clock, and at
// most a bounded number of leases at once. A member that acknowledges a
// write (a record change, an UPDATE, a zone created, replaced or deleted)
// first sends a NOTIFY (RFC 1996) to every router whose lease has not
// expired, at the lease query's source address and the port it named; its
// question is the lease query's (a name the router serves, so that its
// server takes it) and the option in notify mode carries the token and
// time of the lease, the zone and what changed, signed. The member waits
// until each router answered (a signed answer) or its lease expired. A
// router answers the NOTIFY once it has dropped what the change may make
// stale; it takes only signed notices carrying its token, for a lease it
// asked for lately.
//
// A router trusts its cache only while it holds an unexpired lease on
// every member: it counts a lease from when it sent the request, and the
// member from when it received it, so the member never stops notifying a
// router that still trusts its lease. A member that starts waits one
// maximum lease duration before acknowledging a write, for leases a
// previous run of it granted.

// MaxLease bounds the lease duration a member grants.
const MaxLease = 3 * time.Second

// MaxSkew bounds how far the time of a lease request (the router's clock)
// may be from the member's clock: a request outside it is not granted.
const MaxSkew = 10 * time.Second

const (
	modeLease  = 3 // a lease request (a query), or its grant
	modeNotify = 4 // a change notice (a NOTIFY), or its answer
)

// TokenLen is the length of a lease's token.
const TokenLen = 8

// leaseLen is the length of a lease option's fields before its MAC.
const leaseLen = 3 + 2 + 4 + TokenLen + 8

// Lease is what a router asks a member for.
type Lease struct {
	Port     uint16         // the router's DNS port, where notices go
	Duration time.Duration  // capped at MaxLease by LeaseRequested
	Token    [TokenLen]byte // random, per router run and member: notices carry it back
	// Time is when the router asked, by its clock (to the millisecond): a
	// member grants a token's requests only in increasing time and near its
	// own clock, and notices carry it back.
	Time time.Time
	// MAC authenticates the request (auth.go); set by RequestLease and
	// LeaseRequested. The grant's MAC covers it.
	MAC [MACLen]byte
}

func (l Lease) data() []byte {
	data := make([]byte, 0, leaseLen+MACLen)
	data = append(data, version, modeLease, 0)
	data = binary.BigEndian.AppendUint16(data, l.Port)
	data = binary.BigEndian.AppendUint32(data, uint32(l.Duration/time.Millisecond))
	data = append(data, l.Token[:]...)
	return binary.BigEndian.AppendUint64(data, uint64(l.Time.UnixMilli()))
}

// leaseOption returns the lease option of m, nil when it has none.
func leaseOption(m *dns.Msg) []byte {
	p, found := payload(m)
	if !found || len(p) != leaseLen+MACLen || p[1] != modeLease {
		return nil
	}
	return p
}

func parseLease(p []byte) Lease {
	l := Lease{
		Port:     binary.BigEndian.Uint16(p[3:5]),
		Duration: time.Duration(binary.BigEndian.Uint32(p[5:9])) * time.Millisecond,
		Time:     time.UnixMilli(int64(binary.BigEndian.Uint64(p[9+TokenLen:]))),
	}
	copy(l.Token[:], p[9:9+TokenLen])
	copy(l.MAC[:], p[leaseLen:])
	return l
}

// RequestLease adds the option in lease mode to query m, signed with k:
// the sender asks for change notices to its DNS port, naming m's question
// (a name of its zones, so that its server takes them), for l.Duration. The
// token comes back in every notice. It returns l with its MAC, which the
// grant's covers (LeaseGranted).
func RequestLease(m *dns.Msg, l Lease, k *Key) Lease {
	opt := m.IsEdns0()
	if opt == nil {
		m.SetEdns0(dns.DefaultMsgSize, false)
		opt = m.IsEdns0()
	}
	l.Time = time.UnixMilli(l.Time.UnixMilli())
	data := l.data()
	if k != nil {
		l.MAC = k.mac(labelRequest, 0, qnameBytes(m), data)
	}
	data = append(data, l.MAC[:]...)
	opt.Option = append(opt.Option, &dns.EDNS0_LOCAL{Code: Code, Data: data})
	return l
}

// IsLeaseRequest reports whether query r carries the option in lease mode,
// signed or not.
func IsLeaseRequest(r *dns.Msg) bool {
	p, found := payload(r)
	return found && len(p) >= 2 && p[1] == modeLease
}

// LeaseRequested returns the lease that query r asks for; ok is false when
// r is not a lease request signed under k (a nil k: none is). The duration
// is capped at MaxLease. Whether its time is current is the caller's to
// check.
func LeaseRequested(r *dns.Msg, k *Key) (l Lease, ok bool) {
	p := leaseOption(r)
	if p == nil || !k.check(p[leaseLen:], labelRequest, 0, qnameBytes(r), p[:leaseLen]) {
		return Lease{}, false
	}
	l = parseLease(p)
	l.Duration = min(l.Duration, MaxLease)
	return l, l.Port != 0 && l.Duration > 0
}

// GrantLease adds to reply m the grant of lease l (as LeaseRequested
// returned it) and the member's applied index, signed with k: the MAC
// covers the request's and the index.
func GrantLease(m *dns.Msg, l Lease, index uint64, k *Key) {
	opt := m.IsEdns0()
	if opt == nil {
		m.SetEdns0(dns.DefaultMsgSize, false)
		opt = m.IsEdns0()
	}
	data := l.data()
	idx := binary.BigEndian.AppendUint64(nil, index)
	mac := k.mac(labelGrant, 0, l.MAC[:], idx, data)
	opt.Option = append(opt.Option, &dns.EDNS0_LOCAL{Code: Code, Data: append(data, mac[:]...)},
		&dns.EDNS0_LOCAL{Code: IndexCode, Data: idx})
}

// LeaseGranted reports whether response m grants lease sent (as
// RequestLease returned it) under k, and returns the applied index the
// grant carries.
func LeaseGranted(m *dns.Msg, sent Lease, k *Key) (index uint64, ok bool) {
	p := leaseOption(m)
	index, found := IndexOf(m)
	if p == nil || !found {
		return 0, false
	}
	got := parseLease(p)
	if got.Token != sent.Token || !got.Time.Equal(sent.Time) ||
		!k.check(p[leaseLen:], labelGrant, 0, sent.MAC[:], binary.BigEndian.AppendUint64(nil, index), p[:leaseLen]) {
		return 0, false
	}
	return index, true
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
	// MAC is the notice's (set by Msg and NoticeOf): the router's answer
	// covers it (AckNotice).
	MAC [MACLen]byte
}

// noticeHead is the length of a notice option's fixed fields before its
// MAC: version, mode, change, token, the lease's time, index, serial, base.
const noticeHead = 3 + TokenLen + 8 + 8 + 4 + 4

// Msg returns the NOTIFY carrying n, signed with k, to the router that
// asked for lease l with a query for qname: its question is qname (so that
// the router's server takes it whatever the zone), and the option holds
// the lease's token and time, the change, the zone and the names, unless
// there are too many: then the notice is about every name of the zone. The
// returned notice has the message's MAC.
func (n Notice) Msg(qname string, l Lease, k *Key) (*dns.Msg, Notice) {
	m := new(dns.Msg)
	m.SetNotify(dns.Fqdn(qname))
	m.SetEdns0(dns.DefaultMsgSize, false)
	data := make([]byte, 0, noticeHead+MACLen+256)
	data = append(data, version, modeNotify, byte(n.Change))
	data = append(data, l.Token[:]...)
	data = binary.BigEndian.AppendUint64(data, uint64(l.Time.UnixMilli()))
	data = binary.BigEndian.AppendUint64(data, n.Index)
	data = binary.BigEndian.AppendUint32(data, n.Serial)
	data = binary.BigEndian.AppendUint32(data, n.Base)
	data = append(data, make([]byte, MACLen)...) // the MAC, below
	buf := make([]byte, 256)
	k1, err := dns.PackDomainName(dns.Fqdn(n.Zone), buf, 0, nil, false)
	if err != nil {
		k1, buf = 1, []byte{0} // the root: every name
	}
	data = append(data, buf[:k1]...)
	if n.Change == Records && len(n.Names) <= maxNoticeNames {
		list := data
		for _, name := range n.Names {
			k2, err := dns.PackDomainName(dns.Fqdn(name), buf, 0, nil, false)
			if err != nil || len(list)+k2 > maxNoticeBytes {
				list = data
				break
			}
			list = append(list, buf[:k2]...)
		}
		data = list
	}
	if k != nil {
		n.MAC = k.mac(labelNotice, 0, qnameBytes(m), data[:noticeHead], data[noticeHead+MACLen:])
	}
	copy(data[noticeHead:], n.MAC[:])
	m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_LOCAL{Code: Code, Data: data})
	return m, n
}

// IsNotice reports whether r is a NOTIFY carrying the option in notify
// mode, signed or not.
func IsNotice(r *dns.Msg) bool {
	p, found := payload(r)
	return r.Opcode == dns.OpcodeNotify && found && len(p) >= 2 && p[1] == modeNotify
}

// NoticeOf returns the notice that message r carries, with the token and
// time of the lease it was sent for; ok is false when r is not a NOTIFY
// carrying the option in notify mode signed under k, or the option is
// malformed.
func NoticeOf(r *dns.Msg, k *Key) (n Notice, l Lease, ok bool) {
	if r.Opcode != dns.OpcodeNotify || len(r.Question) != 1 {
		return Notice{}, l, false
	}
	p, found := payload(r)
	if !found || len(p) < noticeHead+MACLen+1 || p[1] != modeNotify ||
		!k.check(p[noticeHead:noticeHead+MACLen], labelNotice, 0, qnameBytes(r), p[:noticeHead], p[noticeHead+MACLen:]) {
		return Notice{}, l, false
	}
	n.Change = Change(p[2])
	if n.Change != Records && n.Change != ZonePut && n.Change != ZoneDeleted {
		return Notice{}, l, false
	}
	copy(l.Token[:], p[3:3+TokenLen])
	l.Time = time.UnixMilli(int64(binary.BigEndian.Uint64(p[3+TokenLen:])))
	n.Index = binary.BigEndian.Uint64(p[3+TokenLen+8:])
	n.Serial = binary.BigEndian.Uint32(p[3+TokenLen+16:])
	n.Base = binary.BigEndian.Uint32(p[3+TokenLen+20:])
	copy(n.MAC[:], p[noticeHead:])
	zone, off, err := dns.UnpackDomainName(p, noticeHead+MACLen)
	if err != nil {
		return Notice{}, l, false
	}
	n.Zone = zone
	for off < len(p) {
		name, next, err := dns.UnpackDomainName(p, off)
		if err != nil || next <= off {
			return Notice{}, l, false
		}
		n.Names = append(n.Names, name)
		off = next
	}
	return n, l, true
}

// AckNotice adds to reply m (the router's NOERROR to notice n) the option
// in notify mode with a MAC under k over the notice's: the member takes
// the answer as the router's.
func AckNotice(m *dns.Msg, n Notice, k *Key) {
	opt := m.IsEdns0()
	if opt == nil {
		m.SetEdns0(dns.DefaultMsgSize, false)
		opt = m.IsEdns0()
	}
	mac := k.mac(labelAck, 0, n.MAC[:])
	opt.Option = append(opt.Option, &dns.EDNS0_LOCAL{Code: Code, Data: append([]byte{version, modeNotify, 0}, mac[:]...)})
}

// NoticeAcked reports whether response m is the answer under k of the
// router to notice n.
func NoticeAcked(m *dns.Msg, n Notice, k *Key) bool {
	p, found := payload(m)
	return found && len(p) == 3+MACLen && p[1] == modeNotify && k.check(p[3:], labelAck, 0, n.MAC[:])
}
