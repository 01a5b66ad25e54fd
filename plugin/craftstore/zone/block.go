package zone

import (
	"encoding/binary"
	"fmt"
	"net"
	"unsafe"

	"github.com/miekg/dns"
)

// A name whose RRs are all of the common types below is kept in one
// allocation the garbage collector does not scan (a []uint64's): its node
// and its tail (wire.go), its RRs packed without their owner and then its
// name, and nothing else:
//
//	node | packed RRs | name
//
// The node keeps no dns.RR values (rrs is nil): the packed RRs are the
// only copy. The common answers are appended from them as they are
// (AppendReply); Lookup, the API, transfers and writes decode the RRs they
// need (records, rrset), new values on each call, which costs an
// allocation or two per RR on those paths and saves the RR structs, their
// slice and what they point to on every name held (BenchmarkMemory: about
// half of a host name's memory).
//
// The node's only pointer, its name, points into the block, so the block
// lives exactly as long as something outside it points into it, and the
// collector marks it without reading it. The node has fBlock set; a write
// changes only nodes it allocated as plain nodes (set.go).

// maxBlock bounds a block's size; a larger name is kept the plain way.
const maxBlock = 64 << 10

// The types a node's block holds (A, AAAA, CNAME, NS, PTR, MX, SRV, TXT)
// are those whose packed form decodes to the record it was packed from
// (TestBlockRoundTrip); synthesize (answer.go) and withOwner (set.go) copy
// them field by field. A type added here goes in both and in blockTypes
// (set_test.go), which TestBlockTypeList checks blockRR against.

// blockRR reports whether a block holds rr.
func blockRR(rr dns.RR) bool {
	switch rr := rr.(type) {
	case *dns.A:
		return rr.A.To4() != nil
	case *dns.AAAA:
		return len(rr.AAAA) == net.IPv6len
	case *dns.CNAME, *dns.NS, *dns.PTR, *dns.MX, *dns.SRV:
		return true
	case *dns.TXT:
		return len(rr.Txt) > 0
	}
	return false
}

// blockSize returns the size of the block of a node with tail octets of
// tail holding rrs; ok is false when a block does not hold them all, or
// would be larger than maxBlock.
func blockSize(tail int, rrs []dns.RR) (size uintptr, ok bool) {
	for _, rr := range rrs {
		if !blockRR(rr) {
			return 0, false
		}
	}
	size = unsafe.Sizeof(node{}) + uintptr(tail)
	return size, size <= maxBlock
}

// newBlockNode allocates a block of size bytes (blockSize's) and returns
// its node and its tail of tail octets.
func newBlockNode(tail int, size uintptr) (*node, []byte) {
	mem := unsafe.Pointer(unsafe.SliceData(make([]uint64, (size+7)/8)))
	t := unsafe.Slice((*byte)(unsafe.Add(mem, unsafe.Sizeof(node{}))), tail)
	return (*node)(mem), t
}

// unpackRRs decodes w, RRs packed without their owners (a node's wire or
// a run of it), as RRs owned by name, which they share.
func unpackRRs(w []byte, name string) []dns.RR {
	out := make([]dns.RR, 0, wireCount(w))
	for pos := 0; pos+10 <= len(w); {
		h := dns.RR_Header{
			Name:     name,
			Rrtype:   binary.BigEndian.Uint16(w[pos:]),
			Class:    binary.BigEndian.Uint16(w[pos+2:]),
			Ttl:      binary.BigEndian.Uint32(w[pos+4:]),
			Rdlength: binary.BigEndian.Uint16(w[pos+8:]),
		}
		end := pos + 10 + int(h.Rdlength)
		var rr dns.RR
		var err error
		switch {
		case h.Rrtype == dns.TypeA && h.Rdlength == net.IPv4len:
			// Addresses, most of what zones hold, in one allocation each.
			c := new(struct {
				rr dns.A
				ip [net.IPv4len]byte
			})
			c.ip = [net.IPv4len]byte(w[pos+10 : end])
			c.rr.Hdr, c.rr.A = h, c.ip[:]
			rr = &c.rr
		case h.Rrtype == dns.TypeAAAA && h.Rdlength == net.IPv6len:
			c := new(struct {
				rr dns.AAAA
				ip [net.IPv6len]byte
			})
			c.ip = [net.IPv6len]byte(w[pos+10 : end])
			c.rr.Hdr, c.rr.AAAA = h, c.ip[:]
			rr = &c.rr
		default:
			rr, _, err = dns.UnpackRRWithHeader(h, w[:end], pos+10)
		}
		if err != nil {
			// The zone packed these octets itself, from RRs of the types
			// TestBlockRoundTrip decodes: memory corruption or a bug.
			panic(fmt.Sprintf("zone: the packed RRs of %s do not decode: %v", name, err))
		}
		out = append(out, rr)
		pos = end
	}
	return out
}

// records returns the RRs at n, sorted by type: *n.rrs, or for a node
// whose RRs are only packed (a block's) the RRs decoded from its wire, new
// on each call.
func (n *node) records() []dns.RR {
	switch {
	case n.rrs != nil:
		return *n.rrs
	case n.wlen > 0:
		return unpackRRs(n.wireOf(), n.name)
	}
	return nil
}

// setRecords makes rrs the RRs of n, a node of the write in progress:
// in n's own slice header when it has one (no node shares another's:
// view.mine), else in a new one.
func (n *node) setRecords(rrs []dns.RR) {
	if n.rrs == nil {
		n.rrs = &rrs
		return
	}
	*n.rrs = rrs
}

// hasData reports whether n holds RRs.
func (n *node) hasData() bool { return (n.rrs != nil && len(*n.rrs) > 0) || n.wlen > 0 }

// count returns the number of RRs at n.
func (n *node) count() int {
	if n.rrs != nil {
		return len(*n.rrs)
	}
	return wireCount(n.wireOf())
}

// wireCount returns the number of RRs packed in w.
func wireCount(w []byte) int {
	c := 0
	for pos := 0; pos+10 <= len(w); pos += 10 + int(binary.BigEndian.Uint16(w[pos+8:])) {
		c++
	}
	return c
}
