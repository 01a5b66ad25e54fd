package zone

import (
	"encoding/binary"
	"slices"
	"strings"
	"unsafe"

	"github.com/craftdns/craftdns/internal/policy"

	"github.com/miekg/dns"
)

// The common answers straight in wire form, without a dns.Msg.
//
// A query for a name that exists, with or without the RRset asked for, or
// for a name that exists nowhere and that no wildcard covers, possibly at
// the end of a chain of CNAMEs in the zone, is answered by AppendReply: the header, the question as the client spelled it, the
// RRset as the zone stores it, the authority section packed once per
// version of the zone's apex, and the OPT record. The bytes are those that
// Lookup's answer gets from CoreDNS's server (ScrubWriter: SizeAndDo,
// Scrub, uncompressed Msg.Pack), so a client cannot tell the two paths
// apart; TestAppendReplyEqualsLookup checks every query of the zone
// package's differential cases both ways. Everything else (DNAME,
// wildcards, referrals, ANY, CNAME loops and long chains, names outside the
// zone, answers too large for the client) is left to Lookup.

// packRRs packs rrs uncompressed, as Msg.Pack does; nil if it cannot.
func packRRs(rrs []dns.RR) []byte {
	var p packer
	b, ok := p.pack(rrs)
	if !ok || len(b) == 0 {
		return nil
	}
	return b
}

// maxPacked bounds the RRsets of a packed answer: a CNAME chain longer
// than maxPacked-1 is left to Lookup.
const maxPacked = 8

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
	return z.AppendReplyFor(buf, r, size, nil, nil)
}

// AppendReplyFor is AppendReply for client cl (nil: none), whose query
// carries ECS option ecs (nil: none): a name with a request-routing
// policy for the type asked answers with what the policy chooses for cl,
// as LookupFor does, and the reply's OPT record carries ecs back with the
// policy's scope (policy.Echo). Without cl such a query is for Lookup.
func (z *Zone) AppendReplyFor(buf []byte, r *dns.Msg, size int, cl *policy.Client, ecs *dns.EDNS0_SUBNET) (out []byte, rcode int, ok bool) {
	v := z.read()
	defer z.done(v)
	if v.soa == nil {
		return buf, 0, false
	}
	if v.negWire == nil || (len(v.apexNS) > 0 && v.apexNSWire == nil) {
		return buf, 0, false // not packed: not reached, the zone's RRs pack
	}
	q := r.Question[0]
	if q.Qtype == dns.TypeANY || policy.Reserved(q.Qtype) {
		return buf, 0, false
	}
	// The RRsets of the answer section: the CNAMEs of a chain, then the
	// RRset asked for.
	var sets [maxPacked]packedSet
	nsets, ancount := 0, 0
	var auth []byte
	nsCount := 0
	target := q.Name
	var targetWire []byte // after a CNAME, its target as packed; nil for q.Name
	var picked []dns.RR   // a policy's answer: the RRset asked for
	pickedAt := ""        // its owner
	// The lower-case name of each step goes in buf's spare room, which
	// the reply fills only after the loop: no buffer on the stack.
	buf = grow(buf, 512)
	for step := 0; ; step++ {
		var name []byte
		if targetWire == nil {
			name = appendLower(buf[len(buf):len(buf)], target)
		} else if name, ok = appendLowerWire(buf[len(buf):len(buf)], targetWire); !ok {
			return buf, 0, false // a target that presentation form escapes: Lookup
		}
		encl, off, in := v.closestEncloser(name)
		if !in {
			if step == 0 {
				return buf, 0, false // REFUSED, from Lookup
			}
			break // a chain that leaves the zone ends there
		}
		if cut, _, d, _ := v.above(name, encl, off, q.Qtype); cut != nil || d != nil {
			return buf, 0, false
		}
		if off > 0 {
			if v.wildcard(name, off, encl) != nil {
				return buf, 0, false
			}
			rcode, auth, nsCount = dns.RcodeNameError, v.negWire, 1
			break
		}
		if set := encl.packedSet(q.Qtype); set.count > 0 {
			if encl.wlen == 0 {
				return buf, 0, false // not packed: Lookup
			}
			if encl.flags&fPolicy != 0 {
				if cl == nil {
					return buf, 0, false
				}
				if rrs, ok := policy.Pick(encl.records(), v.regions(), q.Qtype, cl); ok {
					picked, pickedAt, ancount = rrs, encl.name, ancount+len(rrs)
					set.count = 0
				}
			}
			if set.count > 0 {
				sets[nsets], nsets, ancount = set, nsets+1, ancount+int(set.count)
			}
			if q.Qtype != dns.TypeDS && q.Qtype != dns.TypeDNSKEY && !(q.Qtype == dns.TypeNS && encl == v.apex) {
				auth, nsCount = v.apexNSWire, len(v.apexNS)
			}
			break
		}
		if encl.flags&fCNAME == 0 {
			auth, nsCount = v.negWire, 1 // NODATA
			break
		}
		// A CNAME: answer it and follow its target, unless the chain
		// is long or comes back to a name (a loop, which Lookup ends
		// as NSD does).
		if nsets == len(sets)-1 || slices.ContainsFunc(sets[:nsets], func(s packedSet) bool { return s.n == encl }) {
			return buf, 0, false
		}
		cname := encl.packedSet(dns.TypeCNAME)
		if encl.wlen == 0 || cname.count == 0 {
			return buf, 0, false
		}
		w := encl.wireOf()
		targetWire = w[cname.from+10 : cname.from+10+int32(binary.BigEndian.Uint16(w[cname.from+8:]))]
		sets[nsets], nsets, ancount = cname, nsets+1, ancount+int(cname.count)
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
	binary.BigEndian.PutUint16(h[6:], uint16(ancount))
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

	for _, set := range sets[:nsets] {
		buf = set.append(buf)
	}
	if picked != nil {
		if buf, ok = appendAddrs(buf, pickedAt, picked); !ok {
			return buf[:start], 0, false
		}
	}
	buf = append(buf, auth...)
	if opt != nil {
		// The reply's OPT as CoreDNS's SizeAndDo makes it: the client's
		// UDP size, version 0, DO echoed, no options but a policy's ECS.
		var do uint32
		if opt.Do() {
			do = 1 << 15
		}
		buf = append(buf, 0, byte(dns.TypeOPT>>8), byte(dns.TypeOPT))
		buf = binary.BigEndian.AppendUint16(buf, opt.UDPSize())
		buf = binary.BigEndian.AppendUint32(buf, do)
		if picked != nil && ecs != nil {
			rdlen := len(buf)
			buf = policy.AppendECS(append(buf, 0, 0), ecs, cl.Scope)
			binary.BigEndian.PutUint16(buf[rdlen:], uint16(len(buf)-rdlen-2))
		} else {
			buf = append(buf, 0, 0)
		}
	}
	if len(buf)-start > size {
		return buf[:start], 0, false // Lookup's answer is truncated by the server
	}
	return buf, rcode, true
}

// A node's RRs are kept packed too (made when the node's data is set), each
// RR without its owner name, in the node's order:
//
//	per RR: type, class, TTL, RDLENGTH, RDATA.
//
// An RRset of the node is a run of those; a reply puts the node's name
// before each of its RRs, which gives the bytes Msg.Pack gives for the RRs
// themselves. A node whose RRs spell their owner otherwise than the node's
// canonical name (in upper case, say) has no wire, and its RRs are packed
// when answered.
//
// The packed octets come right before the node's name, in one allocation
// (dataNode), and the node keeps their length (wlen) instead of a pointer
// to them: the node stays under 64 bytes, one cache line, which is what a
// query costs (TestNodeSize), and holds one pointer less for the garbage
// collector to follow.

// packer packs RRs uncompressed as the answer section of a message
// (Msg.PackBuffer), reusing its message and buffer, and not with
// dns.PackRR, which writes each RR's Rdlength: the zone's RRs are read
// concurrently, by queries and by other zones holding the same RRs, and
// never written. A write packs each RR it stores without garbage.
type packer struct {
	msg dns.Msg
	buf []byte
}

// pack returns rrs packed (owners included), valid until the next call.
func (p *packer) pack(rrs []dns.RR) ([]byte, bool) {
	p.msg.Answer = rrs
	b, err := p.msg.PackBuffer(p.buf[:cap(p.buf)])
	p.msg.Answer = nil
	if err != nil || len(b) < 12 {
		return nil, false
	}
	p.buf = b
	return b[12:], true
}

// dataNode returns a copy of n (this write's) holding rrs, made for
// queries: n's fields, its packed RRs and its name after them, in one
// allocation: a block (block.go), which keeps the RRs packed only, when
// they are all of the common types, else a typed block holding a single
// RR or none (below), beside the RRs. A query reads the node, the name and
// the packed RRs from adjacent memory. The RRs a typed block keeps are
// copies that share the node's name (withOwner); those given are left
// alone. It returns nil when n's RRs do not pack (see above).
func dataNode(n *node, rrs []dns.RR, ed *edit) *node {
	if len(rrs) == 0 {
		return nil
	}
	var nb [256]byte
	owner, ok := appendWireName(nb[:0], n.name)
	if !ok {
		return nil
	}
	size := 0
	for _, rr := range rrs {
		if rr.Header().Name != n.name {
			return nil
		}
		size += dns.Len(rr) - len(owner)
	}
	if size > 0xffff {
		return nil
	}
	var (
		b     *node
		tail  []byte
		list  *[]dns.RR // a typed block's slice header
		slot  *[1]dns.RR
		flags = n.flags
	)
	if bsize, ok := blockSize(size+len(n.name), rrs); ok {
		b, tail = newBlockNode(size+len(n.name), bsize)
		flags |= fBlock
	} else if b, list, slot, tail = newBlock(size + len(n.name)); b == nil {
		// Too large for a typed block: the node, its RRs and its octets apart.
		b, list, tail = new(node), new([]dns.RR), make([]byte, size+len(n.name))
	}
	out := tail[:0]
	for i := range rrs {
		p, ok := ed.pk.pack(rrs[i : i+1]) // the RR with its owner
		if !ok || len(p) < len(owner) || string(p[:len(owner)]) != string(owner) || len(out)+len(p)-len(owner) > size {
			return nil
		}
		out = append(out, p[len(owner):]...)
	}
	name := append(out[len(out):len(out)], n.name...)
	*b = node{
		name:  unsafe.String(unsafe.SliceData(name), len(name)),
		wlen:  uint16(len(out)),
		kids:  n.kids,
		flags: flags,
		ed:    ed.id,
	}
	switch {
	case flags&fBlock != 0:
		// The packed RRs are the block's only copy (records).
	case slot != nil && len(rrs) == 1:
		slot[0] = withOwner(rrs[0], b.name)
		*list, b.rrs = slot[:], list
	default:
		// rrs is this write's own array (Set's sorted copy, Load's
		// appends): its RRs can be replaced in place.
		for i, rr := range rrs {
			rrs[i] = withOwner(rr, b.name)
		}
		*list, b.rrs = rrs, list
	}
	return b
}

// block is a node allocated with room for one RR and a tail of octets (T
// is a byte array), for names whose RRs a block (block.go) does not hold.
//
// The tail comes right after the node: what a query reads of a block (the
// node, then the name and the packed RRs) is its first bytes, in adjacent
// cache lines.
type block[T any] struct {
	n    node
	tail T
	list []dns.RR // the node's RRs: slot[:]
	slot [1]dns.RR
}

func newPlain[T any]() (*node, *[]dns.RR, *[1]dns.RR, []byte) {
	b := new(block[T])
	return &b.n, &b.list, &b.slot, unsafe.Slice((*byte)(unsafe.Pointer(&b.tail)), unsafe.Sizeof(b.tail))
}

// newBlock returns a node in a typed block whose tail holds at least n
// octets; nil when n is large. The tails' sizes make the blocks fill the
// runtime's size classes.
func newBlock(n int) (*node, *[]dns.RR, *[1]dns.RR, []byte) {
	switch {
	case n <= 32:
		return newPlain[[32]byte]()
	case n <= 48:
		return newPlain[[48]byte]()
	case n <= 64:
		return newPlain[[64]byte]()
	case n <= 96:
		return newPlain[[96]byte]()
	case n <= 128:
		return newPlain[[128]byte]()
	case n <= 176:
		return newPlain[[176]byte]()
	case n <= 272:
		return newPlain[[272]byte]()
	}
	return nil, nil, nil, nil
}

// wireOf returns the packed RRs of n, nil if it has none: the wlen octets
// before its name.
func (n *node) wireOf() []byte {
	if n.wlen == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(unsafe.StringData(n.name)), -int(n.wlen))), n.wlen)
}

// appendWireName appends name (presentation form, fully qualified) in wire
// form, as dns.PackDomainName packs it uncompressed. It keeps no buffer on
// the stack: a query's goroutine must not have to grow its stack.
func appendWireName(dst []byte, name string) ([]byte, bool) {
	if strings.IndexByte(name, '\\') >= 0 || name == "." || len(name) > 254 {
		return packWireName(dst, name)
	}
	start := 0
	for i := 0; i < len(name); i++ {
		if name[i] != '.' {
			continue
		}
		l := i - start
		if l == 0 || l > 63 {
			return dst, false
		}
		dst = append(dst, byte(l))
		dst = append(dst, name[start:i]...)
		start = i + 1
	}
	if start != len(name) {
		return dst, false // not fully qualified
	}
	return append(dst, 0), true
}

// appendLowerWire appends w, a name packed uncompressed, in presentation
// form lower-cased (ASCII), as appendLower appends the name's presentation
// form; ok is false for the root, for a name with an octet that
// presentation form escapes, and for one that is not well formed.
func appendLowerWire(dst, w []byte) (out []byte, ok bool) {
	for i := 0; i < len(w); {
		l := int(w[i])
		if l == 0 {
			return dst, i > 0
		}
		if l > 63 || i+1+l > len(w) {
			return dst, false
		}
		for _, c := range w[i+1 : i+1+l] {
			switch {
			case 'A' <= c && c <= 'Z':
				c += 'a' - 'A'
			case c <= ' ' || c >= 0x7f, c == '.', c == '\\', c == '"', c == '\'', c == '(', c == ')', c == ';', c == '@', c == '$':
				return dst, false
			}
			dst = append(dst, c)
		}
		dst = append(dst, '.')
		i += 1 + l
	}
	return dst, false
}

// packWireName is appendWireName for names with escapes, the root and
// names too long for a zone.
func packWireName(dst []byte, name string) ([]byte, bool) {
	off := len(dst)
	dst = grow(dst, 512)
	end, err := dns.PackDomainName(name, dst[:cap(dst)], off, nil, false)
	if err != nil {
		return dst[:off], false
	}
	return dst[:end], true
}

// packedSet is an RRset of a node ready to be appended to a reply: a run
// of the node's wire. It is small: a reply holds up to maxPacked of them on
// the stack.
type packedSet struct {
	n        *node
	from, to int32 // the run of the node's wire
	count    int32 // RRs; 0: no such RRset
}

// packedSet returns the RRset of type t at n.
func (n *node) packedSet(t uint16) packedSet {
	w := n.wireOf()
	if w == nil {
		return packedSet{n: n, count: int32(len(n.rrset(t)))} // for Lookup
	}
	set := packedSet{n: n}
	for pos := 0; pos+10 <= len(w); {
		rt := binary.BigEndian.Uint16(w[pos:])
		end := pos + 10 + int(binary.BigEndian.Uint16(w[pos+8:]))
		switch {
		case rt < t:
		case rt == t:
			if set.count == 0 {
				set.from = int32(pos)
			}
			set.to = int32(end)
			set.count++
		default:
			return set
		}
		pos = end
	}
	return set
}

// append appends the RRset's RRs to buf; the node has a wire.
func (s packedSet) append(buf []byte) []byte {
	w := s.n.wireOf()
	// The node's name before the first RR, a copy of it before the others.
	ownerAt := len(buf)
	buf, _ = appendWireName(buf, s.n.name) // packNode checked it
	ownerEnd := len(buf)
	for pos := int(s.from); pos < int(s.to); {
		end := pos + 10 + int(binary.BigEndian.Uint16(w[pos+8:]))
		if pos > int(s.from) {
			buf = append(buf, buf[ownerAt:ownerEnd]...)
		}
		buf = append(buf, w[pos:end]...)
		pos = end
	}
	return buf
}

// appendAddrs appends rrs, A or AAAA records of owner (a policy's answer),
// uncompressed.
func appendAddrs(buf []byte, owner string, rrs []dns.RR) ([]byte, bool) {
	for _, rr := range rrs {
		var ok bool
		if buf, ok = appendWireName(buf, owner); !ok {
			return buf, false
		}
		h := rr.Header()
		buf = binary.BigEndian.AppendUint16(buf, h.Rrtype)
		buf = binary.BigEndian.AppendUint16(buf, h.Class)
		buf = binary.BigEndian.AppendUint32(buf, h.Ttl)
		switch rr := rr.(type) {
		case *dns.A:
			buf = append(binary.BigEndian.AppendUint16(buf, 4), rr.A.To4()...)
		case *dns.AAAA:
			buf = append(binary.BigEndian.AppendUint16(buf, 16), rr.AAAA.To16()...)
		default:
			return buf, false
		}
	}
	return buf, true
}
