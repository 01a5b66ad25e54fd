package shardproto

import (
	"encoding/binary"

	"github.com/miekg/dns"
)

// Applied indexes: how a router reads a member's confirmed state without a
// round trip to the leader.
//
// While a router holds a change lease on every member (lease.go), every
// write acknowledged anywhere was notified to it before the
// acknowledgment, with the applied index of the member that took it, which
// covers the write. The router keeps, per shard, the highest index it was
// told (by notices, by lease grants: a member's applied index when it
// granted, which covers the writes acknowledged before the lease, and by
// answers: the member's applied index when it answered, so that the
// router's reads never go back), and sends it with each routed query. A
// member that has applied that index answers at once; one that has not
// waits for its apply a few ticks, then answers SERVFAIL Not Ready so that
// the router tries another. Without the index (no leases, or a probe) the
// member confirms its state with its leader instead (Raft's ReadIndex).

// IndexCode is the EDNS0 option that carries a member's applied index in
// its answers to routed queries and lease requests (8 bytes, big endian).
const IndexCode uint16 = Code + 1

// SetMinIndex asks, in routed query m, for a state that has applied index
// (at least). It changes m's option in place (a query the router built for
// this exchange); a query without the option is left as it is.
func SetMinIndex(m *dns.Msg, index uint64) {
	opt := m.IsEdns0()
	if opt == nil {
		return
	}
	for _, o := range opt.Option {
		if l, ok := o.(*dns.EDNS0_LOCAL); ok && l.Code == Code && len(l.Data) >= 2 && (l.Data[1] == modeFacts || l.Data[1] == modeFresh) {
			flags := byte(0)
			if len(l.Data) >= 3 {
				flags = l.Data[2]
			}
			l.Data = binary.BigEndian.AppendUint64(append(l.Data[:2], flags), index)
		}
	}
}

// MinIndex returns the index routed query r asks the member to have
// applied; ok is false when it names none.
func MinIndex(r *dns.Msg) (uint64, bool) {
	d, ok := payload(r)
	if !ok || len(d) < 11 || (d[1] != modeFacts && d[1] != modeFresh) {
		return 0, false
	}
	return binary.BigEndian.Uint64(d[3:11]), true
}

// AttachIndex adds the member's applied index to response m, when m
// carries an OPT record.
func AttachIndex(m *dns.Msg, index uint64) {
	if opt := m.IsEdns0(); opt != nil {
		opt.Option = append(opt.Option, &dns.EDNS0_LOCAL{Code: IndexCode, Data: binary.BigEndian.AppendUint64(nil, index)})
	}
}

// IndexOf returns the applied index response m carries; ok is false when
// it carries none.
func IndexOf(m *dns.Msg) (uint64, bool) {
	opt := m.IsEdns0()
	if opt == nil {
		return 0, false
	}
	for _, o := range opt.Option {
		if l, ok := o.(*dns.EDNS0_LOCAL); ok && l.Code == IndexCode && len(l.Data) == 8 {
			return binary.BigEndian.Uint64(l.Data), true
		}
	}
	return 0, false
}
