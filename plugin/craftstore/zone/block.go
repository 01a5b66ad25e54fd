package zone

import (
	"net"
	"unsafe"

	"github.com/miekg/dns"
)

// A name whose RRs are all of the common types below is kept in one
// allocation the garbage collector does not scan (a []uint64's): its node,
// its packed RRs and its name (the tail, wire.go), the node's RR slice, a
// copy of each RR, and what those copies point to (owner, addresses,
// target names, TXT strings), in this order:
//
//	node | tail | [k]dns.RR | the k RR structs | their octets
//
// Every pointer in such a block points into the block itself, so the block
// lives exactly as long as something outside it (a trie entry, a query's
// stack, a reply's dns.Msg) points into it, and the collector marks it
// without reading it: it follows one pointer per name where it followed
// five or more (BenchmarkCollect). The node has fBlock set. Nothing may
// store a pointer to other memory in a block: writes change only nodes they
// allocated as plain nodes (set.go), and the copies are made here, of
// types whose pointers TestBlockTypes lists (a new pointer field in
// miekg/dns fails it).
//
// The RRs given to Set and Load are left alone: other zones may hold them.

// maxBlock bounds a block's size; a larger name is kept the plain way.
const maxBlock = 64 << 10

// blockLayout places a block's parts in order, each aligned.
type blockLayout struct{ off uintptr }

func (l *blockLayout) take(n, align uintptr) uintptr {
	l.off = (l.off + align - 1) &^ (align - 1)
	o := l.off
	l.off += n
	return o
}

// The types a node's block holds (A, AAAA, CNAME, NS, PTR, MX, SRV, TXT)
// are copied field by field rather than by dns.Copy, each a case of four
// type switches: blockRR and blockFill.copy here, synthesize (answer.go)
// and withOwner (set.go). A type added to one goes in all four and in
// blockTypes (set_test.go), which TestBlockTypeList checks blockRR against
// and the others with; TestBlockTypes checks the fields blockFill.copy
// copies.

// blockRR returns the bytes of rr's copy in a block: its struct (and for a
// TXT its strings' headers), 8-aligned, and the octets it points to; ok is
// false for a type that blocks do not hold.
func blockRR(rr dns.RR) (size, octets uintptr, ok bool) {
	switch rr := rr.(type) {
	case *dns.A:
		if rr.A.To4() == nil {
			return 0, 0, false
		}
		return unsafe.Sizeof(*rr), net.IPv4len, true
	case *dns.AAAA:
		if len(rr.AAAA) != net.IPv6len {
			return 0, 0, false
		}
		return unsafe.Sizeof(*rr), net.IPv6len, true
	case *dns.CNAME:
		return unsafe.Sizeof(*rr), uintptr(len(rr.Target)), true
	case *dns.NS:
		return unsafe.Sizeof(*rr), uintptr(len(rr.Ns)), true
	case *dns.PTR:
		return unsafe.Sizeof(*rr), uintptr(len(rr.Ptr)), true
	case *dns.MX:
		return unsafe.Sizeof(*rr), uintptr(len(rr.Mx)), true
	case *dns.SRV:
		return unsafe.Sizeof(*rr), uintptr(len(rr.Target)), true
	case *dns.TXT:
		if len(rr.Txt) == 0 {
			return 0, 0, false
		}
		n := 0
		for _, s := range rr.Txt {
			n += len(s)
		}
		return unsafe.Sizeof(*rr) + uintptr(len(rr.Txt))*unsafe.Sizeof(""), uintptr(n), true
	}
	return 0, 0, false
}

// blockSize returns the size of the block of a node with tail octets of
// tail and rrs, and where in it the octets of the RRs' copies start; ok is
// false when rrs do not all go in a block, or the block would be larger
// than maxBlock.
func blockSize(tail int, rrs []dns.RR) (size, octetsAt uintptr, ok bool) {
	l := blockLayout{off: unsafe.Sizeof(node{})}
	l.take(uintptr(tail), 1)
	l.take(uintptr(len(rrs))*unsafe.Sizeof(dns.RR(nil)), 8)
	var octets uintptr
	for _, rr := range rrs {
		s, o, ok := blockRR(rr)
		if !ok {
			return 0, 0, false
		}
		l.take(s, 8)
		octets += o
	}
	if l.off+octets > maxBlock {
		return 0, 0, false
	}
	return l.off + octets, l.off, true
}

// blockFill copies RRs into a block, in the order of blockSize's layout.
type blockFill struct {
	mem    unsafe.Pointer
	l      blockLayout // where the next RR struct goes
	octets uintptr     // where the next octets go
}

// newBlockNode allocates the block of a node with a tail of tail octets
// and rrs (blockSize's ok must have been true), and returns its node, its
// tail, its RR slice (empty: fill it with copy) and the filler.
func newBlockNode(tail int, rrs []dns.RR, size, octetsAt uintptr) (*node, []byte, []dns.RR, blockFill) {
	mem := unsafe.Pointer(unsafe.SliceData(make([]uint64, (size+7)/8)))
	f := blockFill{mem: mem, l: blockLayout{off: unsafe.Sizeof(node{})}, octets: octetsAt}
	t := unsafe.Slice((*byte)(unsafe.Add(mem, f.l.take(uintptr(tail), 1))), tail)
	slots := unsafe.Slice((*dns.RR)(unsafe.Add(mem, f.l.take(uintptr(len(rrs))*unsafe.Sizeof(dns.RR(nil)), 8))), len(rrs))
	return (*node)(mem), t, slots[:0], f
}

// str returns s copied into the block's octets.
func (f *blockFill) str(s string) string {
	if s == "" {
		return ""
	}
	p := unsafe.Add(f.mem, f.octets)
	f.octets += uintptr(len(s))
	copy(unsafe.Slice((*byte)(p), len(s)), s)
	return unsafe.String((*byte)(p), len(s))
}

// ip returns ip copied into the block's octets.
func (f *blockFill) ip(ip net.IP) net.IP {
	p := unsafe.Add(f.mem, f.octets)
	f.octets += uintptr(len(ip))
	b := unsafe.Slice((*byte)(p), len(ip))
	copy(b, ip)
	return b
}

// at returns where the next RR struct of size bytes goes.
func (f *blockFill) at(size uintptr) unsafe.Pointer {
	return unsafe.Add(f.mem, f.l.take(size, 8))
}

// copy returns a copy of rr (a type blockRR takes) in the block, owned by
// name (the block's). The struct is copied whole (blockCopy), then each of
// its pointers is pointed at a copy in the block of what it pointed to.
func (f *blockFill) copy(rr dns.RR, name string) dns.RR {
	switch rr := rr.(type) {
	case *dns.A:
		c := blockCopy(f, rr, name, 0)
		c.A = f.ip(rr.A.To4())
		return c
	case *dns.AAAA:
		c := blockCopy(f, rr, name, 0)
		c.AAAA = f.ip(rr.AAAA)
		return c
	case *dns.CNAME:
		c := blockCopy(f, rr, name, 0)
		c.Target = f.str(rr.Target)
		return c
	case *dns.NS:
		c := blockCopy(f, rr, name, 0)
		c.Ns = f.str(rr.Ns)
		return c
	case *dns.PTR:
		c := blockCopy(f, rr, name, 0)
		c.Ptr = f.str(rr.Ptr)
		return c
	case *dns.MX:
		c := blockCopy(f, rr, name, 0)
		c.Mx = f.str(rr.Mx)
		return c
	case *dns.SRV:
		c := blockCopy(f, rr, name, 0)
		c.Target = f.str(rr.Target)
		return c
	case *dns.TXT:
		// The strings' headers come right after the struct.
		c := blockCopy(f, rr, name, uintptr(len(rr.Txt))*unsafe.Sizeof(""))
		txt := unsafe.Slice((*string)(unsafe.Add(unsafe.Pointer(c), unsafe.Sizeof(*rr))), len(rr.Txt))
		for i, s := range rr.Txt {
			txt[i] = f.str(s)
		}
		c.Txt = txt
		return c
	}
	panic("zone: blockFill.copy of a type blockRR does not take")
}

// blockCopy places a copy of rr's struct in the block, with extra bytes
// after it, owned by name. Its other pointers still point where rr's do:
// the caller points them into the block.
func blockCopy[T any, P interface {
	*T
	dns.RR
}](f *blockFill, rr P, name string, extra uintptr) P {
	c := P((*T)(f.at(unsafe.Sizeof(*rr) + extra)))
	*c = *rr
	c.Header().Name = name
	return c
}
