package craftroute

import (
	"fmt"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func negAnswer(t *testing.T, name string, soaTTL uint32) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	m.Rcode = dns.RcodeNameError
	soa, err := dns.NewRR(fmt.Sprintf("example.org. %d IN SOA ns1.example.org. h.example.org. 1 2 3 4 300", soaTTL))
	if err != nil {
		t.Fatal(err)
	}
	m.Ns = []dns.RR{soa}
	return m
}

// always is a validity check that passes every entry.
func always(string, uint64) bool { return true }

func TestNegCache(t *testing.T) {
	now := time.Unix(1000, 0)
	nc := newNegCache(3)
	nc.now = func() time.Time { return now }

	nc.put("Nx.Example.org.", dns.TypeA, true, false, negAnswer(t, "nx.example.org.", 60), 0)
	if nc.get("nx.example.org.", dns.TypeA, true, false, always) == nil {
		t.Fatal("miss right after put (case must not matter)")
	}
	for _, k := range []struct {
		qtype    uint16
		edns, do bool
	}{{dns.TypeAAAA, true, false}, {dns.TypeA, false, false}, {dns.TypeA, true, true}} {
		if nc.get("nx.example.org.", k.qtype, k.edns, k.do, always) != nil {
			t.Errorf("hit for another key %+v", k)
		}
	}

	// The answer keeps the zone's TTLs, as one server gives them; the
	// entry expires with its SOA's TTL.
	now = now.Add(20 * time.Second)
	m := nc.get("nx.example.org.", dns.TypeA, true, false, always)
	if m == nil || m.Ns[0].Header().Ttl != 60 {
		t.Fatalf("after 20 s: %v", m)
	}
	now = now.Add(40 * time.Second)
	if nc.get("nx.example.org.", dns.TypeA, true, false, always) != nil {
		t.Fatal("hit after the negative TTL")
	}

	// Bounded (256 shards of at least 4 entries), and purged per zone.
	for i := range 5000 {
		nc.put(fmt.Sprintf("n%d.example.org.", i), dns.TypeA, true, false, negAnswer(t, "x.", 60), 0)
	}
	n := nc.len()
	if n > 256*4 || n < 256 {
		t.Fatalf("%d entries, want at most the bound 1024", n)
	}
	nc.purge("other.org")
	if left := nc.len(); left != n {
		t.Fatalf("purging another zone dropped entries: %d of %d left", left, n)
	}
	nc.purge("Example.ORG")
	if n := nc.len(); n != 0 {
		t.Fatalf("%d entries left after the purge", n)
	}

	// A lookup allocates nothing when it misses (every query of key mode
	// name asks the cache first).
	if n := testing.AllocsPerRun(100, func() { nc.get("miss.example.org.", dns.TypeA, true, false, always) }); n != 0 {
		t.Errorf("expected a missing lookup to allocate nothing, got %v allocations", n)
	}

	// No SOA or a zero TTL: not cached; a disabled cache caches nothing.
	nc.put("z.example.org.", dns.TypeA, true, false, new(dns.Msg), 0)
	nc.put("y.example.org.", dns.TypeA, true, false, negAnswer(t, "y.", 0), 0)
	off := newNegCache(0)
	off.put("z.example.org.", dns.TypeA, true, false, negAnswer(t, "z.", 60), 0)
	if nc.len() != 0 || off.get("z.example.org.", dns.TypeA, true, false, always) != nil {
		t.Fatal("cached what must not be")
	}
}

// TestChangeTracker: an answer is void after a change notified at its
// name, at an ancestor (its zone), at an ancestor's wildcard or below it,
// and after void; a change elsewhere leaves it valid. An answer whose
// resolution began before a change is void even when stored after it.
func TestChangeTracker(t *testing.T) {
	const name = "a.b.example.org."
	for _, c := range []struct {
		zone  string
		names []string
		valid bool
	}{
		{"example.org.", []string{"a.b.example.org."}, false},
		{"example.org.", []string{"b.example.org."}, false},     // an ancestor (a delegation, a new closest encloser)
		{"example.org.", []string{"*.b.example.org."}, false},   // the wildcard of an ancestor
		{"example.org.", []string{"x.a.b.example.org."}, false}, // below: a.b becomes an empty non-terminal
		{"example.org.", nil, false},                            // the whole zone (a zone put or deleted)
		{"b.example.org.", nil, false},                          // a zone created between
		{"example.org.", []string{"c.b.example.org."}, true},    // a sibling
		{"example.org.", []string{"*.a.b.example.org."}, false}, // below, and its wildcard
		{"example.org.", []string{"*.c.b.example.org."}, true},  // a sibling's wildcard
		{"other.org.", []string{"a.b.example.org.other.org."}, true},
	} {
		ct := newChangeTracker()
		ct.changed("example.org.", []string{"unrelated.example.org."})
		start := ct.begin()
		if !ct.valid(name, start) {
			t.Fatalf("%v: void before any change", c)
		}
		ct.changed(c.zone, c.names)
		if got := ct.valid(name, start); got != c.valid {
			t.Errorf("change %s %v: valid %v, want %v", c.zone, c.names, got, c.valid)
		}
		if !ct.valid(name, ct.begin()) {
			t.Errorf("change %s %v: an answer begun after it is void", c.zone, c.names)
		}
	}
	ct := newChangeTracker()
	start := ct.begin()
	ct.void()
	if ct.valid(name, start) {
		t.Error("valid after void")
	}
	if n := testing.AllocsPerRun(100, func() { ct.valid(name, ct.begin()) }); n != 0 {
		t.Errorf("expected valid to allocate nothing, got %v", n)
	}
}

// TestNegCacheChain: a negative answer reached through CNAMEs (one a DNAME
// synthesized) is void after a change at any name of the chain: above a
// target (a DNAME moved), at a target, not only at the query name.
func TestNegCacheChain(t *testing.T) {
	m := negAnswer(t, "cn.example.org.", 60)
	for _, s := range []string{
		"cn.example.org. 60 IN CNAME a.old.example.org.",
		"old.example.org. 60 IN DNAME new.example.org.",
		"a.old.example.org. 60 IN CNAME a.New.example.org.",
	} {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		m.Answer = append(m.Answer, rr)
	}
	for _, c := range []struct {
		changed string
		hit     bool
	}{
		{"unrelated.example.org.", true},
		{"old.example.org.", false},   // the DNAME above the first target
		{"a.new.example.org.", false}, // the last target
		{"cn.example.org.", false},    // the query name
	} {
		nc := newNegCache(16)
		ct := newChangeTracker()
		nc.put("cn.example.org.", dns.TypeA, true, false, m, ct.begin())
		ct.changed("example.org.", []string{c.changed})
		if got := nc.get("cn.example.org.", dns.TypeA, true, false, ct.valid) != nil; got != c.hit {
			t.Errorf("after a change at %s: hit %v, want %v", c.changed, got, c.hit)
		}
	}
}
