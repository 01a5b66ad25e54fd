package zone

import (
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"testing"

	"github.com/miekg/dns"
)

// benchZone returns exampleOrg with n more A records, host<i>.example.org.
func benchZone(b *testing.B, n int) *Zone {
	z := load(b, "example.org.", exampleOrg)
	z.Load(hosts(n, "example.org."))
	return z
}

func hosts(n int, origin string) []dns.RR {
	rrs := make([]dns.RR, n)
	for i := range rrs {
		rrs[i] = &dns.A{
			Hdr: dns.RR_Header{Name: fmt.Sprintf("host%d.%s", i, origin), Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 3600},
			A:   net.IPv4(10, byte(i>>16), byte(i>>8), byte(i)),
		}
	}
	return rrs
}

// benchCases are the queries of BenchmarkLookup and BenchmarkAppendReply;
// packed says whether AppendReply answers them.
var benchCases = []struct {
	name   string
	qname  string
	qtype  uint16
	packed bool
}{
	{"hit", "host4711.example.org.", dns.TypeA, true},
	{"hit-0x20", "HoSt4711.ExAmPlE.oRg.", dns.TypeA, true},
	{"nodata", "host4711.example.org.", dns.TypeAAAA, true},
	{"nxdomain", "nothere.example.org.", dns.TypeA, true},
	{"wildcard", "foo.nd.example.org.", dns.TypeAAAA, false},
	{"cname", "c1.example.org.", dns.TypeA, true},
	{"referral", "www.sub.example.org.", dns.TypeA, false},
}

func BenchmarkLookup(b *testing.B) {
	z := benchZone(b, 100000)
	for _, bc := range benchCases {
		b.Run(bc.name, func(b *testing.B) {
			m := new(dns.Msg)
			m.Answer = make([]dns.RR, 0, 8)
			m.Ns = make([]dns.RR, 0, 8)
			m.Extra = make([]dns.RR, 0, 8)
			b.ReportAllocs()
			for b.Loop() {
				m.Answer, m.Ns, m.Extra = m.Answer[:0], m.Ns[:0], m.Extra[:0]
				z.Lookup(m, bc.qname, bc.qtype)
			}
		})
	}
}

func BenchmarkLookupParallel(b *testing.B) {
	z := benchZone(b, 100000)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		m := new(dns.Msg)
		m.Answer = make([]dns.RR, 0, 8)
		m.Ns = make([]dns.RR, 0, 8)
		for pb.Next() {
			m.Answer, m.Ns = m.Answer[:0], m.Ns[:0]
			z.Lookup(m, "host4711.example.org.", dns.TypeA)
		}
	})
}

// BenchmarkSet measures a change of 100 names in a 100k-name zone: readers
// do not wait for it; its allocations are the next version's new paths.
func BenchmarkSet(b *testing.B) {
	z := benchZone(b, 100000)
	changes := make([]NameRecords, 100)
	for i, rr := range hosts(100, "set.example.org.") {
		changes[i] = NameRecords{Name: rr.Header().Name, RRs: []dns.RR{rr}}
	}
	b.ReportAllocs()
	for b.Loop() {
		z.Set(changes)
	}
}

// BenchmarkMemory reports the heap held per record by a zone of 1M A records
// (host<i>.example.org.) after Load: "B/record" is all the zone holds (the
// RRs given are garbage then: the zone keeps them packed, block.go);
// "zone-B/record" is that less what the RRs took as a zone file parser
// makes them (dns.A values, their names and addresses): below zero when
// the zone holds less than the parsed RRs.
//
// "objects/record" counts the heap objects per record, which is what the
// garbage collector's marking costs most in: the zone's share of every
// cycle's work.
func BenchmarkMemory(b *testing.B) {
	const n = 1000000
	for b.Loop() {
		before, objects := heap()
		rrs := hosts(n, "example.org.")
		parsed, _ := heap()
		z := New("example.org.")
		z.Load(rrs)
		rrs = nil
		loaded, loadedObjects := heap()
		b.ReportMetric(float64(loaded-before)/n, "B/record")
		b.ReportMetric(float64(loaded-parsed)/n, "zone-B/record")
		b.ReportMetric(float64(loadedObjects-objects)/n, "objects/record")
		runtime.KeepAlive(z)
	}
}

// heap returns the bytes and objects allocated on the heap after a
// collection.
func heap() (int64, int64) {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc), int64(ms.HeapObjects)
}

// BenchmarkAppendReply is BenchmarkLookup's queries packed (wire.go), with
// EDNS; the cases Lookup keeps (wildcard, referral) are left out.
func BenchmarkAppendReply(b *testing.B) {
	z := benchZone(b, 100000)
	for _, bc := range benchCases {
		if !bc.packed {
			continue
		}
		b.Run(bc.name, func(b *testing.B) {
			r := new(dns.Msg)
			r.SetQuestion(bc.qname, bc.qtype)
			r.SetEdns0(1232, false)
			buf := make([]byte, 0, 1232)
			b.ReportAllocs()
			for b.Loop() {
				out, _, ok := z.AppendReply(buf[:0], r, 1232)
				if !ok {
					b.Fatal("not packed")
				}
				buf = out
			}
		})
	}
}

// BenchmarkAppendReplyRandom asks for the zone's names in random order, a
// different name each time, as a server's queries do: unlike the benchmarks
// above, whose one name stays in the CPU's caches, it counts the cache
// misses of the trie walk and of the node read. 10% of the names asked for
// do not exist (NXDOMAIN).
func BenchmarkAppendReplyRandom(b *testing.B) {
	const n = 100000
	z := benchZone(b, n)
	rng := rand.New(rand.NewPCG(1, 2))
	qs := make([]*dns.Msg, 1<<16)
	for i := range qs {
		name := fmt.Sprintf("host%d.example.org.", rng.IntN(n))
		if i%10 == 0 {
			name = fmt.Sprintf("nx%d.example.org.", rng.IntN(n))
		}
		qs[i] = new(dns.Msg).SetQuestion(name, dns.TypeA)
		qs[i].SetEdns0(1232, false)
	}
	buf := make([]byte, 0, 1232)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		out, _, ok := z.AppendReply(buf[:0], qs[i&(len(qs)-1)], 1232)
		if !ok {
			b.Fatal("not packed")
		}
		buf = out
		i++
	}
}

// BenchmarkCollect is one full garbage collection with a zone of 100,000
// names live (run with -cpu 1: the wall time of a cycle is then its CPU).
// A query's share of the collector's work is proportional to this: a cycle
// comes every GOGC% of the live heap allocated, and marks all of it.
func BenchmarkCollect(b *testing.B) {
	for _, mix := range []struct {
		name string
		rrs  func(n int, origin string) []dns.RR
	}{
		{"hosts", hosts},
		{"mixed", mixed},
	} {
		b.Run(mix.name, func(b *testing.B) {
			z := New("example.org.")
			z.Load(mix.rrs(100000, "example.org."))
			runtime.GC()
			for b.Loop() {
				runtime.GC()
			}
			runtime.KeepAlive(z)
		})
	}
}

// mixed returns n names of bench/zonegen's company mix: 60% A, 15% A and
// AAAA, 10% CNAME, 7% MX, 8% TXT.
func mixed(n int, origin string) []dns.RR {
	rrs := make([]dns.RR, 0, n+n/7)
	for i := range n {
		name := fmt.Sprintf("n%d.%s", i, origin)
		hdr := func(t uint16) dns.RR_Header {
			return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: 3600}
		}
		ip := net.IPv4(10, byte(i>>16), byte(i>>8), byte(i))
		switch k := i % 100; {
		case k < 60:
			rrs = append(rrs, &dns.A{Hdr: hdr(dns.TypeA), A: ip})
		case k < 75:
			rrs = append(rrs, &dns.A{Hdr: hdr(dns.TypeA), A: ip},
				&dns.AAAA{Hdr: hdr(dns.TypeAAAA), AAAA: net.ParseIP(fmt.Sprintf("2001:db8::%x", i))})
		case k < 85:
			rrs = append(rrs, &dns.CNAME{Hdr: hdr(dns.TypeCNAME), Target: fmt.Sprintf("n%d.%s", i-10, origin)})
		case k < 92:
			rrs = append(rrs, &dns.MX{Hdr: hdr(dns.TypeMX), Preference: 10, Mx: fmt.Sprintf("mail%d.%s", i%7, origin)})
		default:
			rrs = append(rrs, &dns.TXT{Hdr: hdr(dns.TypeTXT), Txt: []string{fmt.Sprintf("v=spf1 ip4:%s -all", ip)}})
		}
	}
	return rrs
}
