package partition

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestLease(t *testing.T) {
	m := new(dns.Msg)
	m.SetQuestion(".", dns.TypeSOA)
	if _, ok := LeaseRequested(m); ok {
		t.Fatal("a plain query is no lease request")
	}
	want := Lease{Port: 1053, Duration: time.Hour, Token: [TokenLen]byte{1, 2, 3, 4, 5, 6, 7, 8}}
	RequestLease(m, want)
	got, ok := LeaseRequested(wire(t, m))
	want.Duration = MaxLease // capped
	if !ok || got != want {
		t.Errorf("got %+v, %v; want %+v", got, ok, want)
	}
	if _, ok := MinIndex(m); ok || Requested(m) {
		t.Error("a lease request is neither a partition-mode nor a fresh query")
	}
}

func TestNotice(t *testing.T) {
	l := Lease{Port: 1053, Duration: time.Second, Token: [TokenLen]byte{9, 8, 7, 6, 5, 4, 3, 2}}
	names := []string{"a.example.org.", "*.b.example.org."}
	m := wire(t, Notice{Zone: "example.org.", Change: Records, Names: names, Index: 7, Serial: 4294967295, Base: 12}.Msg("router.zone.", l))
	if m.Question[0].Name != "router.zone." || m.Opcode != dns.OpcodeNotify {
		t.Errorf("expected a NOTIFY for the lease query's name, got %v", m.Question)
	}
	n, token, ok := NoticeOf(m)
	if !ok || n.Zone != "example.org." || n.Change != Records || !slices.Equal(n.Names, names) || token != l.Token ||
		n.Index != 7 || n.Serial != 4294967295 || n.Base != 12 {
		t.Errorf("got %+v %v %v", n, token, ok)
	}
	// Too many names: the whole zone.
	var many []string
	for i := range maxNoticeNames + 1 {
		many = append(many, fmt.Sprintf("n%d.example.org.", i))
	}
	if n, _, ok := NoticeOf(wire(t, Notice{Zone: "example.org.", Change: Records, Names: many}.Msg(".", l))); !ok || n.Names != nil {
		t.Errorf("expected a whole-zone notice for %d names, got %v %v", len(many), n.Names, ok)
	}
	// Zone changes carry no names.
	if n, _, ok := NoticeOf(wire(t, Notice{Zone: "example.org.", Change: ZoneDeleted, Names: names}.Msg(".", l))); !ok || n.Change != ZoneDeleted || n.Names != nil {
		t.Errorf("got %+v %v", n, ok)
	}
	// A query is no notice.
	q := new(dns.Msg)
	q.SetQuestion("example.org.", dns.TypeSOA)
	Request(q)
	if _, _, ok := NoticeOf(q); ok {
		t.Error("a query taken for a notice")
	}
}
