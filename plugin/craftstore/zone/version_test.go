package zone

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/miekg/dns"
)

// versionChange is change k of TestReadsSeeOneVersion: the SOA serial k, a
// TXT RRset of three records tagged k at "set", "cn" a CNAME to "t<k>",
// which holds TXT k, and "t<k-1>" gone.
func versionChange(t testing.TB, k int) []NameRecords {
	rr := func(s string) dns.RR {
		r, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	return []NameRecords{
		{Name: "example.org.", RRs: []dns.RR{rr(fmt.Sprintf("example.org. 300 IN SOA ns1.example.org. h.example.org. %d 7200 3600 1209600 300", k)), rr("example.org. 300 IN NS ns1.example.org.")}},
		{Name: "set.example.org.", RRs: []dns.RR{rr(fmt.Sprintf(`set.example.org. 60 IN TXT "%d-a"`, k)), rr(fmt.Sprintf(`set.example.org. 60 IN TXT "%d-b"`, k)), rr(fmt.Sprintf(`set.example.org. 60 IN TXT "%d-c"`, k))}},
		{Name: "cn.example.org.", RRs: []dns.RR{rr(fmt.Sprintf("cn.example.org. 60 IN CNAME t%d.example.org.", k))}},
		{Name: fmt.Sprintf("t%d.example.org.", k), RRs: []dns.RR{rr(fmt.Sprintf(`t%d.example.org. 60 IN TXT "%d"`, k, k))}},
		{Name: fmt.Sprintf("t%d.example.org.", k-1)},
	}
}

// TestReadsSeeOneVersion: while one writer applies 2,000 changes, each of
// several names, readers (through Lookup and through AppendReply) never wait and every answer is that of one
// committed version: an RRset never mixes two changes, a CNAME's target is
// the one of the same change (never NXDOMAIN in between), the SOA of the
// answer is that change's; a version taken before the writes answers as
// it did, whatever came after (nothing published is changed).
func TestReadsSeeOneVersion(t *testing.T) {
	z := New("example.org.")
	z.Set(append(versionChange(t, 1), NameRecords{Name: "ns1.example.org.", RRs: rrs(t, "ns1.example.org. 300 IN A 192.0.2.53")}))
	first := z.load()
	const writes = 2000
	var done atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan string, 16)
	var reads atomic.Int64
	for i := range 4 {
		// Half the readers ask Lookup, half AppendReply (wire.go).
		ask := func(name string, qtype uint16) *dns.Msg {
			m := new(dns.Msg)
			m.SetQuestion(name, qtype)
			z.Lookup(m, name, qtype)
			return m
		}
		if i%2 == 1 {
			ask = func(name string, qtype uint16) *dns.Msg {
				r := new(dns.Msg)
				r.SetQuestion(name, qtype)
				out, _, ok := z.AppendReply(nil, r, 65535)
				m := new(dns.Msg)
				if !ok || m.Unpack(out) != nil {
					m.Rcode = dns.RcodeServerFailure // reported below
				}
				return m
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !done.Load() {
				m := ask("cn.example.org.", dns.TypeTXT)
				if len(m.Answer) != 2 || m.Rcode != dns.RcodeSuccess {
					errs <- fmt.Sprintf("cn TXT: expected the CNAME and its target's TXT, got %v", m)
					return
				}
				k := strings.TrimPrefix(strings.TrimSuffix(m.Answer[0].(*dns.CNAME).Target, ".example.org."), "t")
				if got := m.Answer[1].(*dns.TXT).Txt[0]; got != k {
					errs <- fmt.Sprintf("cn TXT: the CNAME of change %s with the TXT of change %s", k, got)
					return
				}
				m = ask("set.example.org.", dns.TypeTXT)
				if len(m.Answer) != 3 {
					errs <- fmt.Sprintf("set TXT: expected 3 records, got %v", m.Answer)
					return
				}
				tag := strings.Split(m.Answer[0].(*dns.TXT).Txt[0], "-")[0]
				for _, rr := range m.Answer {
					if !strings.HasPrefix(rr.(*dns.TXT).Txt[0], tag+"-") {
						errs <- fmt.Sprintf("set TXT mixes changes: %v", m.Answer)
						return
					}
				}
				m = ask("nothere.example.org.", dns.TypeA)
				if m.Rcode != dns.RcodeNameError || len(m.Ns) != 1 {
					errs <- fmt.Sprintf("nothere A: expected NXDOMAIN with the SOA, got %v", m)
					return
				}
				reads.Add(1)
			}
		}()
	}
	for k := 2; k <= writes; k++ {
		z.Set(versionChange(t, k))
	}
	done.Store(true)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	t.Logf("%d reads during %d writes", reads.Load(), writes)

	// The first version still answers as it did.
	m := new(dns.Msg)
	m.SetQuestion("cn.example.org.", dns.TypeTXT)
	first.lookup(m, "cn.example.org.", dns.TypeTXT, nil)
	if len(m.Answer) != 2 || m.Answer[0].(*dns.CNAME).Target != "t1.example.org." || m.Answer[1].(*dns.TXT).Txt[0] != "1" {
		t.Errorf("a version taken before the writes changed: %v", m.Answer)
	}
	if first.soa.Serial != 1 || first.names.get("t1.example.org.") == nil || first.names.get(fmt.Sprintf("t%d.example.org.", writes)) != nil {
		t.Errorf("a version taken before the writes changed: serial %d", first.soa.Serial)
	}
	if z.load().names.get("t1.example.org.") != nil {
		t.Errorf("the current version still holds t1")
	}
}
