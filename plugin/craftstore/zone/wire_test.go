package zone

import (
	"bytes"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"

	"github.com/craftdns/craftdns/internal/dnsdiff"

	"github.com/miekg/dns"
)

// slowReply is the response craftstore gives through Lookup, as CoreDNS's
// server sends it over UDP (or TCP when tcp is set) from
// test.ResponseWriter (ScrubWriter: SizeAndDo, Scrub, then an uncompressed
// Pack), or nil when the server would truncate or compress it.
func slowReply(t *testing.T, z *Zone, r *dns.Msg, tcp bool) []byte {
	t.Helper()
	m := new(dns.Msg)
	m.SetReply(r)
	if opt := r.IsEdns0(); opt != nil {
		m.SetEdns0(dns.DefaultMsgSize, opt.Do())
	}
	z.Lookup(m, strings.ToLower(r.Question[0].Name), r.Question[0].Qtype)
	state := request.Request{Req: r, W: &test.ResponseWriter{TCP: tcp}}
	state.SizeAndDo(m)
	state.Scrub(m)
	if m.Truncated || m.Compress {
		return nil
	}
	b, err := m.Pack()
	if err != nil {
		t.Fatalf("%s: %v", r.Question[0].Name, err)
	}
	return b
}

// replySize is the size craftstore's ServeDNS gives AppendReply for a UDP
// query from test.ResponseWriter.
func replySize(r *dns.Msg) int {
	state := request.Request{Req: r, W: &test.ResponseWriter{}}
	return min(state.Size(), 1220)
}

// TestAppendReplyEqualsLookup asks every query of the package's tables, and
// of two generated zones, in several forms (EDNS or not, DO, a small buffer,
// RD and CD, mixed case, EDNS options) both ways: where AppendReply
// answers, its bytes must be those of Lookup's answer as the server packs
// it.
func TestAppendReplyEqualsLookup(t *testing.T) {
	type corpus struct {
		origin, zone string
		queries      []dnsdiff.Query
	}
	corpora := []corpus{
		{"example.", rfc4592Zone, casesQueries(rfc4592Cases)},
		{"example.org.", exampleOrg, casesQueries(lookupCases)},
		{"example.org.", dnameOrg, casesQueries(dnameCases)},
		{"net.", dnameApex, casesQueries(dnameApexCases)},
	}
	// Owners spelt in upper case, and in two cases at one name.
	const mixedCase = `@ 300 IN SOA ns hostmaster 1 7200 3600 1209600 300
@ 300 IN NS ns
ns 300 IN A 192.0.2.53
Mixed 300 IN A 192.0.2.1
mixed 300 IN AAAA 2001:db8::1
UP 300 IN A 192.0.2.2
UP 300 IN TXT "up"
cn 300 IN CNAME UP
`
	var mixedQueries []dnsdiff.Query
	for _, name := range []string{"mixed.example.org.", "up.example.org.", "cn.example.org.", "nx.example.org."} {
		for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeTXT, dns.TypeMX, dns.TypeCNAME} {
			mixedQueries = append(mixedQueries, dnsdiff.Query{Name: name, Type: qt})
		}
	}
	corpora = append(corpora, corpus{"example.org.", mixedCase, mixedQueries})
	for _, seed := range []int64{1, 2} {
		zone, queries := dnsdiff.GenerateZone("example.com.", seed, dnsdiff.DefaultNames)
		corpora = append(corpora, corpus{"example.com.", zone, queries})
	}
	forms := []func(r *dns.Msg){
		func(r *dns.Msg) {},
		func(r *dns.Msg) { r.SetEdns0(1232, true) },
		func(r *dns.Msg) { r.SetEdns0(4096, false); r.RecursionDesired = false },
		func(r *dns.Msg) { r.SetEdns0(100, false); r.CheckingDisabled = true },
		func(r *dns.Msg) {
			r.Question[0].Name = strings.ToUpper(r.Question[0].Name[:1]) + r.Question[0].Name[1:]
		},
		func(r *dns.Msg) {
			// Options in the query: none in the reply (SizeAndDo keeps the
			// reply's own OPT, which has none).
			r.SetEdns0(1232, false)
			opt := r.IsEdns0()
			opt.Option = append(opt.Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"}, &dns.EDNS0_NSID{Code: dns.EDNS0NSID})
		},
	}
	fast := map[int]int{}
	var total, slow int
	for _, c := range corpora {
		z := load(t, c.origin, c.zone)
		for i, q := range c.queries {
			for j, form := range forms {
				r := new(dns.Msg)
				r.SetQuestion(dns.Fqdn(q.Name), q.Type)
				r.Id = uint16(i*len(forms) + j)
				form(r)
				total++
				want := slowReply(t, z, r, false)
				got, rcode, ok := z.AppendReply(make([]byte, 0, 64), r, replySize(r))
				if !ok {
					slow++
					continue
				}
				name := q.Name + " " + dns.TypeToString[q.Type]
				if want == nil {
					t.Errorf("%s (form %d): AppendReply answered a reply the server would truncate or compress", name, j)
					continue
				}
				if !bytes.Equal(got, want) {
					var gm, wm dns.Msg
					gm.Unpack(got)
					wm.Unpack(want)
					t.Errorf("%s (form %d): AppendReply differs from Lookup\ngot:\n%s\nwant:\n%s", name, j, &gm, &wm)
					continue
				}
				if rcode != int(wm(want).Rcode) {
					t.Errorf("%s (form %d): rcode %d, the reply says %d", name, j, rcode, wm(want).Rcode)
				}
				fast[wm(want).Rcode]++
				if len(wm(want).Ns) > 0 && len(wm(want).Answer) == 0 && wm(want).Rcode == dns.RcodeSuccess {
					fast[-1]++ // NODATA
				}
				if len(wm(want).Answer) > 0 && wm(want).Answer[0].Header().Rrtype == dns.TypeCNAME && q.Type != dns.TypeCNAME {
					fast[-2]++ // a chain
				}
			}
		}
	}
	t.Logf("%d queries: %d answered by AppendReply (NOERROR %d, of which NODATA %d; NXDOMAIN %d; through CNAMEs %d), %d left to Lookup",
		total, total-slow, fast[dns.RcodeSuccess], fast[-1], fast[dns.RcodeNameError], fast[-2], slow)
	// The test means something only if every kind went both ways.
	if fast[dns.RcodeSuccess]-fast[-1] == 0 || fast[-1] == 0 || fast[dns.RcodeNameError] == 0 || fast[-2] == 0 || slow == 0 {
		t.Errorf("not every kind of reply was compared: %v, %d left to Lookup", fast, slow)
	}
}

// wm unpacks a reply the test packed.
func wm(b []byte) *dns.Msg {
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		panic(err)
	}
	return m
}

// TestAppendReplyTruncates leaves to Lookup an answer larger than the
// client's buffer, which the server truncates.
func TestAppendReplyTruncates(t *testing.T) {
	var sb strings.Builder
	sb.WriteString("@ 300 IN SOA ns hostmaster 1 7200 3600 1209600 300\n@ 300 IN NS ns\nns 300 IN A 192.0.2.1\n")
	for i := range 40 {
		sb.WriteString("big 300 IN TXT \"" + strings.Repeat("x", 20) + string(rune('a'+i%26)) + strings.Repeat("y", i) + "\"\n")
	}
	z := load(t, "example.org.", sb.String())
	r := new(dns.Msg)
	r.SetQuestion("big.example.org.", dns.TypeTXT)
	if _, _, ok := z.AppendReply(nil, r, replySize(r)); ok {
		t.Fatal("a 40-record TXT RRset fit in 512 octets")
	}
	r.SetEdns0(4096, false)
	out, _, ok := z.AppendReply(nil, r, 65535)
	if !ok || !bytes.Equal(out, slowReply(t, z, r, true)) {
		t.Fatalf("over TCP the RRset is answered in full (ok %t)", ok)
	}
}

// TestNodeSize keeps a node in one cache line: a query reads its name,
// flags and packed RRs, and a second line would be a second miss.
func TestNodeSize(t *testing.T) {
	if s := unsafe.Sizeof(node{}); s > 64 {
		t.Errorf("a node is %d bytes, over one 64-byte cache line", s)
	}
}

// TestBlockSizes checks that a block has room for the octets asked for and
// fills one of the runtime's size classes: a block a few bytes over a class
// takes the next one, and wastes the difference in every name.
func TestBlockSizes(t *testing.T) {
	classes := []uintptr{112, 128, 144, 160, 176, 192, 208, 224, 240, 256, 288, 320, 352}
	for n := 1; ; n++ {
		b, _, slot, tail := newBlock(n)
		if b == nil {
			if n <= 256 {
				t.Errorf("no block for %d octets", n)
			}
			break
		}
		if len(tail) < n || slot == nil {
			t.Fatalf("block for %d octets: tail %d, slot %v", n, len(tail), slot != nil)
		}
		// The block ends with the last of its fields, rounded up to
		// its alignment (8).
		base := uintptr(unsafe.Pointer(b))
		end := max(uintptr(unsafe.Pointer(unsafe.SliceData(tail)))+uintptr(len(tail)), uintptr(unsafe.Pointer(slot))+unsafe.Sizeof(*slot))
		size := (end - base + 7) &^ 7
		if !slices.Contains(classes, size) {
			t.Errorf("block for %d octets: %d bytes, not a size class", n, size)
		}
	}
}

func TestAppendWireName(t *testing.T) {
	for _, name := range []string{".", "org.", "www.example.org.", `a\.b.example.org.`, `\065.example.`, "*.wild.example.org.",
		strings.Repeat("a", 63) + ".example.", strings.Repeat("a", 64) + ".example.", "a..example.", "no.dot",
		strings.Repeat("abcdefg.", 31) + "a.", strings.Repeat("abcdefg.", 32)} {
		got, ok := appendWireName([]byte{0xff}, name)
		var buf [512]byte
		end, err := dns.PackDomainName(name, buf[:], 0, nil, false)
		if ok != (err == nil) {
			t.Errorf("%q: appendWireName ok %t, PackDomainName error %v", name, ok, err)
			continue
		}
		if ok && !bytes.Equal(got[1:], buf[:end]) {
			t.Errorf("%q: appendWireName %x, PackDomainName %x", name, got[1:], buf[:end])
		}
	}
}

// TestNoscanBlocks checks the blocks the collector does not scan
// (block.go): after every write each one holds only pointers into itself,
// and after collections that reuse freed memory every name still holds
// its RRs. The writes take the paths that change a node of their own: a
// name set twice and a name deleted while it has children (an empty
// non-terminal), in one write and in another.
func TestNoscanBlocks(t *testing.T) {
	want := map[string][]string{}
	z := New("example.org.")
	for step, ops := range [][]string{
		{"a=A 192.0.2.1", "b.a=A 192.0.2.2", "-a", "c=A 192.0.2.3", "c=A 192.0.2.4"},
		{"d=AAAA 2001:db8::5;A 192.0.2.5", "x.e=CNAME target.example.net.", "m=MX 10 mail.example.net.;MX 20 mx2.example.org."},
		{"e.d=TXT \"v=spf1 -all\" \"two\";TXT \"\"", "-b.a", "s=SRV 0 5 443 srv.example.org.", "p=PTR host.example.org."},
		{"-d", "a=NS ns1.example.net.;NS ns2.example.net.", "e=A 192.0.2.9;A 192.0.2.19"},
		{"-e", "y.c=A 192.0.2.10", "-c", "c=A 192.0.2.11", "m=MX 0 .", "h=HINFO \"cpu\" \"os\""},
	} {
		// Names and RRs in memory of their own, which only the zone
		// keeps after Set.
		changes := make([]NameRecords, len(ops))
		for i, op := range ops {
			label, data, _ := strings.Cut(strings.TrimPrefix(op, "-"), "=")
			name := strings.Clone(label + ".example.org.")
			changes[i].Name = name
			if op[0] == '-' {
				delete(want, name)
				continue
			}
			var texts []string
			for _, d := range strings.Split(data, ";") {
				rr, err := dns.NewRR(name + " 300 IN " + d)
				if err != nil {
					t.Fatal(err)
				}
				changes[i].RRs = append(changes[i].RRs, rr)
				texts = append(texts, rr.String())
			}
			slices.Sort(texts)
			want[name] = texts
		}
		z.Set(changes)
		changes = nil
		churn()
		checkNoscan(t, z, want, step)
	}
	// Load's blocks.
	z = New("example.org.")
	z.Load(hosts(1000, "example.org."))
	churn()
	for i := range 1000 {
		name := fmt.Sprintf("host%d.example.org.", i)
		got := z.RRs(name, dns.TypeA)
		if len(got) != 1 || got[0].Header().Name != name || !got[0].(*dns.A).A.Equal(net.IPv4(10, 0, byte(i>>8), byte(i))) {
			t.Fatalf("Load: %s: %v", name, got)
		}
	}
	checkNoscan(t, z, nil, -1)
}

// churn collects twice, filling the memory freed in between with other data.
func churn() {
	runtime.GC()
	var keep [][]byte
	for i := range 20000 {
		keep = append(keep, bytes.Repeat([]byte{0xee}, 8+i%200))
	}
	runtime.GC()
	runtime.KeepAlive(keep)
}

// checkNoscan checks every name of want (name: its RRs' text, sorted) and
// that every block of z (fBlock) holds no RRs and no pointer but to its
// name, in itself.
func checkNoscan(t *testing.T, z *Zone, want map[string][]string, step int) {
	t.Helper()
	for name, texts := range want {
		var got []string
		for _, rr := range z.RRs(name, 0) {
			got = append(got, rr.String())
		}
		slices.Sort(got)
		if !slices.Equal(got, texts) {
			t.Fatalf("step %d: %s holds %q, want %q", step, name, got, texts)
		}
	}
	blocks := 0
	eachNode(z, func(v *node) {
		if z.load().names.get(v.name) != v {
			t.Fatalf("step %d: the node of %q is not found by its name", step, v.name)
		}
		if v.flags&fBlock == 0 {
			return
		}
		blocks++
		if v.rrs != nil {
			t.Fatalf("step %d: %s: a block holds RRs beside its wire", step, v.name)
		}
		rrs := v.records()
		size, ok := blockSize(int(v.wlen)+len(v.name), rrs)
		if !ok || len(rrs) == 0 {
			t.Fatalf("step %d: %s: a block of RRs a block does not take: %v", step, v.name, rrs)
		}
		lo, hi := uintptr(unsafe.Pointer(v)), uintptr(unsafe.Pointer(v))+size
		if p := uintptr(unsafe.Pointer(unsafe.StringData(v.name))); p < lo || p+uintptr(len(v.name)) > hi {
			t.Fatalf("step %d: %s: the block's name is outside it", step, v.name)
		}
	})
	if blocks == 0 {
		t.Fatalf("step %d: no blocks", step)
	}
}

// TestBlockRoundTrip: the RRs of a block, which keeps them packed only,
// decode to the RRs given, of every type a block holds and in the forms
// their presentation escapes; RRsets decode alone (rrset) as they do with
// the rest of the node (records).
func TestBlockRoundTrip(t *testing.T) {
	texts := []string{
		"a.example.org. 300 IN A 192.0.2.1",
		"a.example.org. 301 IN A 192.0.2.2",
		"a.example.org. 302 IN AAAA 2001:db8::1",
		"a.example.org. 303 IN AAAA ::ffff:192.0.2.9",
		"a.example.org. 304 IN NS ns.Example.ORG.",
		"a.example.org. 305 IN NS n\\.s\\032x.example.org.",
		"a.example.org. 306 IN MX 10 mail.example.org.",
		"a.example.org. 307 IN MX 0 .",
		"a.example.org. 308 IN TXT \"v=spf1 -all\" \"two\"",
		"a.example.org. 309 IN TXT \"q\\\"uote\\\\ semi;colon \\255\\000\" \"\"",
		"a.example.org. 310 IN SRV 0 5 5060 sip.example.org.",
		"b.example.org. 311 IN CNAME Target.Example.net.",
		"c.example.org. 312 IN PTR host\\@x.example.org.",
		"c.example.org. 313 CH PTR ch.example.org.",
	}
	var in []dns.RR
	for _, s := range texts {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		in = append(in, rr)
	}
	z := New("example.org.")
	z.Load(in)
	seen := 0
	for _, name := range []string{"a.example.org.", "b.example.org.", "c.example.org."} {
		n := z.load().names.get(name)
		if n == nil || n.flags&fBlock == 0 || n.rrs != nil {
			t.Fatalf("%s is not a block of packed RRs", name)
		}
		var want []string
		for _, rr := range in {
			if rr.Header().Name == name {
				want = append(want, rr.String())
			}
		}
		var got []string
		for _, rr := range n.records() {
			if rr.Header().Name != n.name {
				t.Errorf("%s: decoded with owner %q", name, rr.Header().Name)
			}
			got = append(got, rr.String())
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s decodes to\n%s\nwant\n%s", name, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		seen += len(got)
		if n.count() != len(got) {
			t.Errorf("%s counts %d RRs, decodes %d", name, n.count(), len(got))
		}
		for _, typ := range blockTypes {
			var set []string
			for _, rr := range n.rrset(typ) {
				set = append(set, rr.String())
			}
			var wantSet []string
			for _, rr := range n.records() {
				if rr.Header().Rrtype == typ {
					wantSet = append(wantSet, rr.String())
				}
			}
			if !slices.Equal(set, wantSet) {
				t.Errorf("%s %s: rrset %q, records hold %q", name, dns.TypeToString[typ], set, wantSet)
			}
		}
	}
	if seen != len(in) || z.Records() != len(in) {
		t.Errorf("decoded %d, the zone counts %d, of %d RRs", seen, z.Records(), len(in))
	}
}
