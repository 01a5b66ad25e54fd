package policy

import (
	"errors"
	"net"
	"net/netip"

	"github.com/miekg/dns"
)

// ErrECS is a malformed EDNS Client Subnet option: the query is answered
// FORMERR (RFC 7871 section 7.1.1 and 6).
var ErrECS = errors.New("malformed EDNS Client Subnet option")

// ECS returns the EDNS Client Subnet option of r, or nil.
func ECS(r *dns.Msg) *dns.EDNS0_SUBNET {
	opt := r.IsEdns0()
	if opt == nil {
		return nil
	}
	for _, o := range opt.Option {
		if e, ok := o.(*dns.EDNS0_SUBNET); ok {
			return e
		}
	}
	return nil
}

// ClientOf returns the client of query r, which came from src: the
// address of its ECS option when it has one (RFC 7871), else src's. It
// returns ErrECS for an option a query must not carry: a scope prefix
// length other than 0, a family other than IPv4 and IPv6 (but for the
// "no address" of prefix length 0), a prefix longer than its family's
// addresses or address bits set past it. A source prefix length of 0
// asks for an answer that depends on no address: the zero Addr.
func ClientOf(r *dns.Msg, src net.Addr) (Client, *dns.EDNS0_SUBNET, error) {
	e := ECS(r)
	if e == nil {
		a := AddrOf(src)
		return Client{Addr: a, Source: uint8(a.BitLen())}, nil, nil
	}
	if e.SourceScope != 0 {
		return Client{}, e, ErrECS
	}
	var bits int
	switch e.Family {
	case 0:
		if e.SourceNetmask != 0 {
			return Client{}, e, ErrECS
		}
		return Client{}, e, nil
	case 1:
		bits = 32
	case 2:
		bits = 128
	default:
		return Client{}, e, ErrECS
	}
	if int(e.SourceNetmask) > bits {
		return Client{}, e, ErrECS
	}
	a, ok := netip.AddrFromSlice(e.Address)
	if !ok {
		return Client{}, e, ErrECS
	}
	if bits == 32 {
		if !a.Unmap().Is4() {
			return Client{}, e, ErrECS
		}
		a = a.Unmap()
	}
	p := netip.PrefixFrom(a, int(e.SourceNetmask))
	if p.Masked().Addr() != a {
		return Client{}, e, ErrECS
	}
	if e.SourceNetmask == 0 {
		return Client{}, e, nil
	}
	return Client{Addr: a, Source: e.SourceNetmask}, e, nil
}

// AddrOf returns the IP address of a (a client's: UDP, TCP, or any address
// whose String is host:port), unmapped; the zero Addr when it has none.
func AddrOf(a net.Addr) netip.Addr {
	switch a := a.(type) {
	case *net.UDPAddr:
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap()
	case *net.TCPAddr:
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap()
	}
	if a == nil {
		return netip.Addr{}
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// Echo adds to reply m, whose query carried ECS option q, the option a
// response carries (RFC 7871 section 7.2.1): the query's family, source
// prefix length and address, and scope, the prefix length the answer was
// chosen by. m must carry an OPT record (the query did).
func Echo(m *dns.Msg, q *dns.EDNS0_SUBNET, scope uint8) {
	opt := m.IsEdns0()
	if opt == nil || q == nil {
		return
	}
	e := &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: q.Family, SourceNetmask: q.SourceNetmask, SourceScope: scope, Address: q.Address}
	switch q.Family {
	case 1:
		e.SourceScope = min(scope, 32)
	case 2:
		e.SourceScope = min(scope, 128)
	default:
		e.SourceScope = 0
	}
	for i, o := range opt.Option {
		if o.Option() == dns.EDNS0SUBNET {
			opt.Option[i] = e
			return
		}
	}
	opt.Option = append(opt.Option, e)
}

// ForClient returns the ECS option a router adds to a query that has
// none, for client address a: the whole address, so that a member
// answers as for the client itself; the router takes it off the reply.
func ForClient(a netip.Addr) *dns.EDNS0_SUBNET {
	a = a.Unmap()
	if !a.IsValid() {
		return nil
	}
	if a.Is4() {
		b := a.As4()
		return &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 32, Address: net.IP(b[:])}
	}
	b := a.As16()
	return &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 2, SourceNetmask: 128, Address: net.IP(b[:])}
}

// AppendClientECS appends to b the option ForClient makes for a, in wire
// form (code, length, family, prefix lengths 32 or 128 and 0, the
// address); nothing for an invalid address, as ForClient makes none.
func AppendClientECS(b []byte, a netip.Addr) []byte {
	a = a.Unmap()
	switch {
	case !a.IsValid():
		return b
	case a.Is4():
		v := a.As4()
		return append(append(b, 0, dns.EDNS0SUBNET, 0, 8, 0, 1, 32, 0), v[:]...)
	}
	v := a.As16()
	return append(append(b, 0, dns.EDNS0SUBNET, 0, 20, 0, 2, 128, 0), v[:]...)
}

// AppendECS appends to b the ECS option (RFC 7871 section 6: code,
// length, family, source and scope prefix lengths, the address's octets
// the source prefix covers) that answers query option q with scope.
func AppendECS(b []byte, q *dns.EDNS0_SUBNET, scope uint8) []byte {
	addr := q.Address
	switch q.Family {
	case 1:
		addr, scope = addr.To4(), min(scope, 32)
	case 2:
		addr, scope = addr.To16(), min(scope, 128)
	default:
		addr, scope = nil, 0
	}
	n := min(int(q.SourceNetmask+7)/8, len(addr))
	b = append(b, 0, dns.EDNS0SUBNET, 0, byte(4+n), byte(q.Family>>8), byte(q.Family), q.SourceNetmask, scope)
	return append(b, addr[:n]...)
}
