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
	if _, _, ok := LeaseRequested(m); ok {
		t.Fatal("a plain query is no lease request")
	}
	RequestLease(m, 1053, time.Hour)
	port, d, ok := LeaseRequested(wire(t, m))
	if !ok || port != 1053 || d != MaxLease {
		t.Errorf("got port %d, %v, %v; want 1053, MaxLease (capped)", port, d, ok)
	}
	if !Leasing(m) || Requested(m) {
		t.Error("a lease request is neither a partition-mode nor a fresh query")
	}
}

func TestNotice(t *testing.T) {
	names := []string{"a.example.org.", "*.b.example.org."}
	zone, c, got, ok := NoticeOf(wire(t, Notice("example.org.", Records, names)))
	if !ok || zone != "example.org." || c != Records || !slices.Equal(got, names) {
		t.Errorf("got %s %v %v %v", zone, c, got, ok)
	}
	// Too many names: the whole zone.
	var many []string
	for i := range maxNoticeNames + 1 {
		many = append(many, fmt.Sprintf("n%d.example.org.", i))
	}
	if _, _, got, ok := NoticeOf(wire(t, Notice("example.org.", Records, many))); !ok || got != nil {
		t.Errorf("expected a whole-zone notice for %d names, got %v %v", len(many), got, ok)
	}
	// Zone changes carry no names.
	if _, c, got, ok := NoticeOf(wire(t, Notice("example.org.", ZoneDeleted, names))); !ok || c != ZoneDeleted || got != nil {
		t.Errorf("got %v %v %v", c, got, ok)
	}
	// A query is no notice.
	q := new(dns.Msg)
	q.SetQuestion("example.org.", dns.TypeSOA)
	Request(q)
	if _, _, _, ok := NoticeOf(q); ok {
		t.Error("a query taken for a notice")
	}
}
