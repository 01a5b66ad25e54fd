package dnswire

import (
	"testing"

	"github.com/miekg/dns"
)

func TestWalk(t *testing.T) {
	m := new(dns.Msg)
	m.SetQuestion("www.example.org.", dns.TypeA)
	m.Response, m.Authoritative, m.Rcode = true, true, dns.RcodeNameError
	a, _ := dns.NewRR("www.example.org. 300 IN A 192.0.2.1")
	ns, _ := dns.NewRR("example.org. 300 IN NS ns.example.org.")
	m.Answer, m.Ns = []dns.RR{a}, []dns.RR{ns}
	m.SetEdns0(1232, true)
	o := m.IsEdns0()
	o.Option = append(o.Option, &dns.EDNS0_LOCAL{Code: 65001, Data: []byte{1, 2, 3}}, &dns.EDNS0_LOCAL{Code: 65002})
	for _, compress := range []bool{false, true} {
		m.Compress = compress
		b, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		h, ok := ParseHeader(b)
		if !ok || h.ID != m.Id || !h.Response || !h.Authz || h.Truncated || h.Rcode != dns.RcodeNameError || h.QD != 1 || h.AN != 1 || h.NS != 1 || h.AR != 1 {
			t.Fatalf("header %+v", h)
		}
		off, ok := SkipQuestions(b, 1)
		if !ok || off != HeaderLen+len("www.example.org.")+1+4 {
			t.Fatalf("question ends at %d", off)
		}
		var types []uint16
		var last RR
		for range 3 {
			rr, ok := NextRR(b, off)
			if !ok {
				t.Fatalf("record at %d", off)
			}
			if HasPointer(b, rr.Off) != (compress && rr.Type != dns.TypeOPT) {
				t.Fatalf("compress %v: record %d owner pointer %v", compress, rr.Type, HasPointer(b, rr.Off))
			}
			types = append(types, rr.Type)
			off, last = rr.End, rr
		}
		if off != len(b) || types[0] != dns.TypeA || types[1] != dns.TypeNS || types[2] != dns.TypeOPT || last.Class != 1232 || last.TTL != 1<<15 {
			t.Fatalf("records %v, end %d of %d, OPT %+v", types, off, len(b), last)
		}
		rdata := b[last.Rdata:last.End]
		o1, p, ok := NextOption(rdata, 0)
		if !ok || o1.Code != 65001 || string(o1.Data) != "\x01\x02\x03" {
			t.Fatalf("option 1 %+v", o1)
		}
		o2, p, ok := NextOption(rdata, p)
		if !ok || o2.Code != 65002 || len(o2.Data) != 0 || p != len(rdata) {
			t.Fatalf("option 2 %+v at %d", o2, p)
		}
		for i := range b {
			// Every prefix fails cleanly somewhere, never panics.
			NextRR(b[:i], HeaderLen)
			SkipQuestions(b[:i], 1)
		}
	}
	// A name over 255 bytes, a label type 01, a loop of pointers is cut at
	// the first pointer.
	long := make([]byte, 0, 300)
	for range 5 {
		long = append(long, 63)
		long = append(long, make([]byte, 63)...)
	}
	long = append(long, 0)
	if _, ok := SkipName(long, 0); ok {
		t.Error("a name of 321 bytes was taken")
	}
	if _, ok := SkipName([]byte{0x40, 0}, 0); ok {
		t.Error("label type 01 was taken")
	}
	if end, ok := SkipName([]byte{0xC0, 0}, 0); !ok || end != 2 {
		t.Error("a pointer does not end the name")
	}
}
