package zone

import (
	"bytes"
	"fmt"
	"net"
	"reflect"
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
		b, slot, tail := newBlock(n)
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
// that every block of z (fBlock) holds only pointers into itself.
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
		size, _, ok := blockSize(int(v.wlen)+len(v.name), v.rrs)
		if !ok {
			t.Fatalf("step %d: %s: a block of RRs a block does not take: %v", step, v.name, v.rrs)
		}
		lo, hi := uintptr(unsafe.Pointer(v)), uintptr(unsafe.Pointer(v))+size
		in := func(what string, p uintptr) {
			if p != 0 && (p < lo || p >= hi) {
				t.Fatalf("step %d: %s: the block's %s points outside it", step, v.name, what)
			}
		}
		in("name", uintptr(unsafe.Pointer(unsafe.StringData(v.name))))
		in("RRs", uintptr(unsafe.Pointer(unsafe.SliceData(v.rrs))))
		for _, rr := range v.rrs {
			pointers(reflect.ValueOf(rr), dns.TypeToString[rr.Header().Rrtype], in)
		}
	})
	if blocks == 0 {
		t.Fatalf("step %d: no blocks", step)
	}
}

// pointers calls in with every pointer v holds (a pointer to a struct, its
// strings, slices and their elements), named by its path.
func pointers(v reflect.Value, path string, in func(string, uintptr)) {
	switch v.Kind() {
	case reflect.Pointer:
		in(path, v.Pointer())
		pointers(v.Elem(), path, in)
	case reflect.Struct:
		for i := range v.NumField() {
			pointers(v.Field(i), path+"."+v.Type().Field(i).Name, in)
		}
	case reflect.String:
		if v.Len() > 0 {
			in(path, uintptr(unsafe.Pointer(unsafe.StringData(v.String()))))
		}
	case reflect.Slice:
		in(path, v.Pointer())
		for i := range v.Len() {
			pointers(v.Index(i), path+"[]", in)
		}
	case reflect.Interface, reflect.Map, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		in(path+" (a "+v.Kind().String()+")", 1) // outside any block
	}
}

// TestBlockTypes checks that the RR types a block holds have the pointers
// blockFill.copy copies, and no others: a field that miekg/dns adds with a
// pointer would point outside the block, to memory the collector frees.
func TestBlockTypes(t *testing.T) {
	for _, c := range []struct {
		rr   dns.RR
		want []string
	}{
		{new(dns.A), []string{"Hdr.Name", "A"}},
		{new(dns.AAAA), []string{"Hdr.Name", "AAAA"}},
		{new(dns.CNAME), []string{"Hdr.Name", "Target"}},
		{new(dns.NS), []string{"Hdr.Name", "Ns"}},
		{new(dns.PTR), []string{"Hdr.Name", "Ptr"}},
		{new(dns.MX), []string{"Hdr.Name", "Mx"}},
		{new(dns.SRV), []string{"Hdr.Name", "Target"}},
		{new(dns.TXT), []string{"Hdr.Name", "Txt"}},
	} {
		var got []string
		var fields func(t reflect.Type, path string)
		fields = func(t reflect.Type, path string) {
			for i := range t.NumField() {
				f := t.Field(i)
				switch f.Type.Kind() {
				case reflect.Struct:
					fields(f.Type, path+f.Name+".")
				case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
					reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Array:
					if f.Type.Kind() == reflect.Array && f.Type.Elem().Kind() != reflect.Uint8 {
						got = append(got, path+f.Name)
					}
				default:
					got = append(got, path+f.Name)
				}
			}
		}
		fields(reflect.TypeOf(c.rr).Elem(), "")
		if !slices.Equal(got, c.want) {
			t.Errorf("%T: fields with pointers %v, blockFill.copy copies %v", c.rr, got, c.want)
		}
	}
}
