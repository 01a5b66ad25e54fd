package zone

import (
	"encoding/binary"

	"github.com/miekg/dns"
)

// The common answers straight in wire form, without a dns.Msg.
//
// A query for a name that exists, with or without the RRset asked for, or
// for a name that exists nowhere and that no wildcard covers, is answered
// by AppendReply: the header, the question as the client spelled it, the
// RRset as the zone stores it, the authority section packed once per
// version of the zone's apex, and the OPT record. The bytes are those that
// Lookup's answer gets from CoreDNS's server (ScrubWriter: SizeAndDo,
// Scrub, uncompressed Msg.Pack), so a client cannot tell the two paths
// apart; TestAppendReplyEqualsLookup checks every query of the zone
// package's differential cases both ways. Everything else (CNAME chains,
// DNAME, wildcards, referrals, ANY, names outside the zone, answers too
// large for the client) is left to Lookup.

// packRRs packs rrs uncompressed, as Msg.Pack does.
func packRRs(rrs []dns.RR) []byte {
	var buf []byte
	for _, rr := range rrs {
		buf = appendRR(buf, rr)
	}
	return buf
}

// appendRR appends rr, packed uncompressed, to buf.
func appendRR(buf []byte, rr dns.RR) []byte {
	n := dns.Len(rr)
	off := len(buf)
	buf = grow(buf, n)
	end, err := dns.PackRR(rr, buf[:off+n], off, nil, false)
	if err != nil {
		return buf[:off] // not reached: the zone's RRs were packed when written
	}
	return buf[:end]
}

// grow returns buf with room for n more bytes.
func grow(buf []byte, n int) []byte {
	if cap(buf)-len(buf) >= n {
		return buf
	}
	nb := make([]byte, len(buf), 2*cap(buf)+n)
	copy(nb, buf)
	return nb
}

// AppendReply appends to buf the whole response to r, a query (opcode
// QUERY, one question, class IN) for a name in the zone, when its answer is
// one of the common cases above and fits in size octets. It returns the
// response and its rcode, or ok false with buf unchanged when the query is
// for Lookup.
func (z *Zone) AppendReply(buf []byte, r *dns.Msg, size int) (out []byte, rcode int, ok bool) {
	v := z.load()
	if v.soa == nil {
		return buf, 0, false
	}
	q := r.Question[0]
	if q.Qtype == dns.TypeANY {
		return buf, 0, false
	}
	var nb [256]byte
	name := appendLower(nb[:0], q.Name)
	encl, off, in := v.closestEncloser(name)
	if !in {
		return buf, 0, false
	}
	if cut, _, d, _ := v.above(name, encl, off, q.Qtype); cut != nil || d != nil {
		return buf, 0, false
	}

	var answer []dns.RR
	var auth []byte
	var nsCount int
	switch {
	case off > 0:
		if v.wildcard(name, off, encl) != nil {
			return buf, 0, false
		}
		rcode, auth, nsCount = dns.RcodeNameError, v.negWire, 1
	default:
		answer = encl.rrset(q.Qtype)
		switch {
		case answer != nil:
			if q.Qtype != dns.TypeDS && q.Qtype != dns.TypeDNSKEY && !(q.Qtype == dns.TypeNS && encl == v.apex) {
				auth, nsCount = v.apexNSWire, len(v.apexNS)
			}
		case encl.flags&fCNAME != 0:
			return buf, 0, false // a chain to follow
		default:
			auth, nsCount = v.negWire, 1 // NODATA
		}
	}

	start := len(buf)
	buf = grow(buf, 12+len(q.Name)+1+4)
	buf = buf[:start+12]
	h := buf[start:]
	binary.BigEndian.PutUint16(h[0:], r.Id)
	// QR, the opcode (QUERY, 0), AA; RD and CD copied (Msg.SetReply).
	flags := uint16(1<<15 | 1<<10 | rcode)
	if r.RecursionDesired {
		flags |= 1 << 8
	}
	if r.CheckingDisabled {
		flags |= 1 << 4
	}
	binary.BigEndian.PutUint16(h[2:], flags)
	binary.BigEndian.PutUint16(h[4:], 1)
	binary.BigEndian.PutUint16(h[6:], uint16(len(answer)))
	binary.BigEndian.PutUint16(h[8:], uint16(nsCount))
	opt := r.IsEdns0()
	if opt != nil {
		binary.BigEndian.PutUint16(h[10:], 1)
	} else {
		binary.BigEndian.PutUint16(h[10:], 0)
	}

	// The question as the client sent it.
	qoff := len(buf)
	buf = buf[:cap(buf)]
	end, err := dns.PackDomainName(q.Name, buf, qoff, nil, false)
	if err != nil || end+4 > len(buf) {
		return buf[:start], 0, false
	}
	binary.BigEndian.PutUint16(buf[end:], q.Qtype)
	binary.BigEndian.PutUint16(buf[end+2:], q.Qclass)
	buf = buf[:end+4]

	for _, rr := range answer {
		buf = appendRR(buf, rr)
	}
	buf = append(buf, auth...)
	if opt != nil {
		// The reply's OPT as CoreDNS's SizeAndDo makes it: the client's
		// UDP size, version 0, DO echoed, no options.
		var do uint32
		if opt.Do() {
			do = 1 << 15
		}
		buf = append(buf, 0, byte(dns.TypeOPT>>8), byte(dns.TypeOPT))
		buf = binary.BigEndian.AppendUint16(buf, opt.UDPSize())
		buf = binary.BigEndian.AppendUint32(buf, do)
		buf = append(buf, 0, 0)
	}
	if len(buf)-start > size {
		return buf[:start], 0, false // Lookup's answer is truncated by the server
	}
	return buf, rcode, true
}
