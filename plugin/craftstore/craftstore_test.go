package craftstore

import (
	"context"
	"errors"
	"testing"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"

	"github.com/craftdns/craftdns/internal/ede"
	"github.com/craftdns/craftdns/internal/shardproto"
	"github.com/craftdns/craftdns/internal/zoneapi"
	"github.com/craftdns/craftdns/plugin/craftstore/replica"

	"github.com/miekg/dns"
)

const partitionZone = `$ORIGIN example.org.
$TTL 300
@ IN SOA ns1 hostmaster 1 7200 3600 1209600 300
@ IN NS ns1
ns1 IN A 192.0.2.53
www IN A 192.0.2.10
alias IN CNAME www
*.w IN TXT "wild"
`

// newZoneMember starts a lone member (newAPI) holding partitionZone as
// example.org and returns it with the zone's records.
func newZoneMember(t *testing.T) (*replica.Replica, []dns.RR) {
	t.Helper()
	_, rep := newAPI(t, "")
	rrs, err := zoneapi.ParseZone("example.org.", partitionZone)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rep.PutZone(context.Background(), "example.org.", rrs, false); err != nil {
		t.Fatal(err)
	}
	return rep, rrs
}

// TestServePartition asks a member in partition mode and in the ordinary
// one, through ServeDNS and the wire format.
func TestServePartition(t *testing.T) {
	rep, _ := newZoneMember(t)
	cs := &Craftstore{Zones: []string{"org."}}
	cs.rep.Store(rep)

	for _, tc := range []struct {
		qname     string
		qtype     uint16
		partition bool
		rcode     int
		answer    int // RRs in the answer section
		facts     shardproto.Facts
		err       error // of shardproto.Parse
	}{
		// A CNAME is not followed in partition mode.
		{"alias.example.org.", dns.TypeA, true, dns.RcodeSuccess, 1, shardproto.Facts{Kind: shardproto.Final, Origin: "example.org."}, nil},
		{"alias.example.org.", dns.TypeA, false, dns.RcodeSuccess, 2, shardproto.Facts{}, shardproto.ErrMissing},
		{"X.w.example.org.", dns.TypeTXT, true, dns.RcodeSuccess, 1, shardproto.Facts{Kind: shardproto.Absent, Labels: 3, Wildcard: true, Origin: "example.org."}, nil},
		{"a.nope.example.org.", dns.TypeA, true, dns.RcodeNameError, 0, shardproto.Facts{Kind: shardproto.Absent, Labels: 2, Origin: "example.org."}, nil},
		{"a.nope.example.org.", dns.TypeA, false, dns.RcodeNameError, 0, shardproto.Facts{}, shardproto.ErrMissing},
		// A zone this member does not hold is refused before any zone answers.
		{"www.other.org.", dns.TypeA, true, dns.RcodeRefused, 0, shardproto.Facts{}, shardproto.ErrMissing},
	} {
		name := tc.qname + " " + dns.TypeToString[tc.qtype]
		r := new(dns.Msg)
		r.SetQuestion(tc.qname, tc.qtype)
		r.SetEdns0(1232, false)
		if tc.partition {
			shardproto.Request(r)
		}
		rec := dnstest.NewRecorder(&test.ResponseWriter{})
		if _, err := cs.ServeDNS(context.Background(), rec, r); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		buf, err := rec.Msg.Pack()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		m := new(dns.Msg)
		if err := m.Unpack(buf); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if m.Rcode != tc.rcode || len(m.Answer) != tc.answer {
			t.Errorf("%s: expected %s with %d answers, got\n%s", name, dns.RcodeToString[tc.rcode], tc.answer, m)
		}
		f, err := shardproto.Parse(m)
		if !errors.Is(err, tc.err) || f != tc.facts {
			t.Errorf("%s: expected facts %+v (%v), got %+v (%v)", name, tc.facts, tc.err, f, err)
		}
	}
}

// TestServeOtherClass: a query of another class than IN for a name of the
// member's zones is refused with a reason, never SERVFAIL.
func TestServeOtherClass(t *testing.T) {
	rep, _ := newZoneMember(t)
	cs := &Craftstore{Zones: []string{"org."}}
	cs.rep.Store(rep)
	for _, class := range []uint16{dns.ClassCHAOS, dns.ClassHESIOD, dns.ClassANY} {
		r := new(dns.Msg)
		r.SetQuestion("www.example.org.", dns.TypeA)
		r.Question[0].Qclass = class
		r.SetEdns0(1232, false)
		rec := dnstest.NewRecorder(&test.ResponseWriter{})
		if _, err := cs.ServeDNS(context.Background(), rec, r); err != nil || rec.Msg == nil {
			t.Fatalf("class %s: nothing written, %v", dns.ClassToString[class], err)
		}
		if rec.Msg.Rcode != dns.RcodeRefused || ede.Of(rec.Msg) == nil {
			t.Errorf("class %s: expected REFUSED with an Extended DNS Error, got %v", dns.ClassToString[class], rec.Msg)
		}
	}
}

// TestServeOpcodes: a NOTIFY for a stored zone is refused (a member is no
// secondary), an opcode that passes CoreDNS's server but is not QUERY gets
// NOTIMP; both with an Extended DNS Error.
func TestServeOpcodes(t *testing.T) {
	rep, _ := newZoneMember(t)
	cs := &Craftstore{Zones: []string{"org."}}
	cs.rep.Store(rep)
	for op, want := range map[int]int{dns.OpcodeNotify: dns.RcodeRefused, dns.OpcodeStatus: dns.RcodeNotImplemented, 15: dns.RcodeNotImplemented} {
		r := new(dns.Msg)
		r.SetQuestion("example.org.", dns.TypeSOA)
		r.Opcode = op
		r.SetEdns0(1232, false)
		rec := dnstest.NewRecorder(&test.ResponseWriter{})
		if _, err := cs.ServeDNS(context.Background(), rec, r); err != nil || rec.Msg == nil {
			t.Fatalf("opcode %d: nothing written, %v", op, err)
		}
		if rec.Msg.Rcode != want || ede.Of(rec.Msg) == nil || len(rec.Msg.Answer) != 0 {
			t.Errorf("opcode %d: expected %s with an Extended DNS Error, got %v", op, dns.RcodeToString[want], rec.Msg)
		}
	}
}
