package dnssec

import (
	"fmt"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// BenchmarkSignAnswer: signing one positive answer (an A RRset) and one
// compact NXDOMAIN (SOA and NSEC), with the cache holding the signatures
// (hit) and with every RRset new (miss: the TTL changes each time), for
// both algorithms.
func BenchmarkSignAnswer(b *testing.B) {
	for _, alg := range []uint8{ECDSAP256SHA256, ED25519} {
		k, err := GenerateKey("example.org.", alg, FlagKSK)
		if err != nil {
			b.Fatal(err)
		}
		keys := &Keys{Zone: "example.org.", Signing: []*Key{k}, TTL: 3600}
		soa := mustRRs([]string{"example.org. 300 IN SOA ns1.example.org. hostmaster.example.org. 1 7200 3600 1209600 300"})
		now := time.Now()
		for _, kind := range []string{"positive", "nxdomain"} {
			for _, hit := range []bool{true, false} {
				name := fmt.Sprintf("%s/%s/%s", dns.AlgorithmToString[alg], kind, map[bool]string{true: "hit", false: "miss"}[hit])
				b.Run(name, func(b *testing.B) {
					s := NewSigner(1 << 16)
					b.ReportAllocs()
					for i := 0; b.Loop(); i++ {
						ttl := uint32(300)
						if !hit {
							ttl = uint32(i%1000000 + 1)
						}
						m := new(dns.Msg)
						m.SetQuestion("www.example.org.", dns.TypeA)
						m.Authoritative = true
						var a Answer
						if kind == "positive" {
							m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: "www.example.org.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: []byte{192, 0, 2, 1}}}
						} else {
							m.Rcode = dns.RcodeNameError
							s := *soa[0].(*dns.SOA)
							s.Hdr.Ttl, s.Minttl = ttl, ttl
							m.Ns = []dns.RR{&s}
							a.Negative = &Denial{}
						}
						if err := s.SignAnswer(m, keys, now, a); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}
