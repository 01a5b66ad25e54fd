package integration

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
	"github.com/craftdns/craftdns/internal/dnsdiff"

	"github.com/miekg/dns"
)

// TestRouterFilters: a router over three shards (shard b paged) fetches
// the shards' existence filters of a zone at its first broadcast and, once
// they settle, asks only the owner about made-up names (the broadcast
// counter stays put, the skip counter counts them), while a router without
// filters asks every shard; every answer of both equals one member's, also
// for names that became empty non-terminals, wildcards and closest
// enclosers through writes after the filters were fetched (through the
// router and directly on a member), for deleted names, and after the zone
// was replaced (issue 54, item 3).
func TestRouterFilters(t *testing.T) {
	const origin = "filters.example."
	wd := harness.Workdir(t)
	s := startSharded(t, wd, 3, 1, []string{origin},
		routerSpec{zones: []string{origin}, key: "name"},
		routerSpec{zones: []string{origin}, key: "name", nameFilters: "0"})
	singleAddr, single := startSingle(t, wd, []string{origin})
	text, queries := dnsdiff.GenerateZone(origin, 54, 3000)
	putZone(t, single, origin, text)
	rt, off := s.routers[0], s.routers[1]
	putZone(t, rt.client(), origin, text)
	addrs := []string{rt.addr(), off.addr()}
	for _, a := range addrs {
		harness.Eventually(t, "the zone through "+a, 20*time.Second, func() bool {
			m, err := harness.Query(a, origin, dns.TypeSOA)
			return err == nil && m.Rcode == dns.RcodeSuccess
		})
	}
	metric := func(r *router, name string) float64 { return metricSum(t, routerMetrics(t, r), name) }
	seq := 0
	madeUp := func(n int) []dnsdiff.Query {
		qs := make([]dnsdiff.Query, n)
		for i := range qs {
			seq++
			qs[i] = dnsdiff.Query{Name: fmt.Sprintf("nx%d.%s", seq, origin), Type: dns.TypeA}
		}
		return qs
	}
	compare := func(what string, qs []dnsdiff.Query) {
		t.Helper()
		for a, res := range compareWithRef(singleAddr, addrs, qs, true) {
			if res.differ > 0 {
				t.Errorf("%s: %d of %d answers of %s differ from one member's: %s", what, res.differ, len(qs), a, res)
			}
		}
	}

	harness.Eventually(t, "the router's filters in use", 30*time.Second, func() bool {
		before := metric(rt, "coredns_craftroute_filter_skips_total")
		harness.Query(rt.addr(), madeUp(1)[0].Name, dns.TypeA)
		return metric(rt, "coredns_craftroute_filter_skips_total") > before
	})

	// Made-up names: the filters rule nearly all out.
	b0, s0, o0 := metric(rt, "coredns_craftroute_broadcasts_total"), metric(rt, "coredns_craftroute_filter_skips_total"), metric(off, "coredns_craftroute_broadcasts_total")
	const n = 200
	compare("made-up names", madeUp(n))
	b1, s1, o1 := metric(rt, "coredns_craftroute_broadcasts_total"), metric(rt, "coredns_craftroute_filter_skips_total"), metric(off, "coredns_craftroute_broadcasts_total")
	t.Logf("%d made-up names: with filters %v broadcasts and %v skipped; without, %v broadcasts", n, b1-b0, s1-s0, o1-o0)
	if b1-b0 > n/10 || s1-s0 < n*9/10 {
		t.Errorf("%d made-up names: expected at most %d broadcasts and at least %d skipped with filters, got %v and %v", n, n/10, n*9/10, b1-b0, s1-s0)
	}
	if o1-o0 < n {
		t.Errorf("%d made-up names: expected a broadcast each without filters, got %v", n, o1-o0)
	}
	// The generated zone's queries (empty non-terminals, wildcards, cuts,
	// CNAME and DNAME chains) answer as one member's.
	compare("the generated queries", sampleQueries(queries, 3))

	// Writes after the filters were fetched: each name is asked at once.
	post := func(a harness.API, add []string, del []any) int {
		var out any
		code, err := a.Do("POST", "/v1/zones/"+origin+"/records", map[string]any{"add": add, "delete": del}, &out)
		if err != nil {
			t.Fatal(err)
		}
		return code
	}
	for i := range 20 {
		leaf := fmt.Sprintf("leaf.e%d.%s 300 IN A 192.0.2.%d", i, origin, i+1)
		for _, a := range []harness.API{single, rt.client()} {
			if code := post(a, []string{leaf}, nil); code != http.StatusOK {
				t.Fatalf("adding %q: %d", leaf, code)
			}
		}
		compare(fmt.Sprintf("e%d after leaf.e%d was added", i, i), []dnsdiff.Query{
			{Name: fmt.Sprintf("e%d.%s", i, origin), Type: dns.TypeA},
			{Name: fmt.Sprintf("x.e%d.%s", i, origin), Type: dns.TypeA},
		})
	}
	// Directly on a member: the one whose shard holds the name takes it.
	for i := range 10 {
		leaf := fmt.Sprintf("leaf.m%d.%s 300 IN TXT direct", i, origin)
		post(single, []string{leaf}, nil)
		took := false
		for _, sh := range s.shards {
			if post(s.members[sh][0].client(), []string{leaf}, nil) == http.StatusOK {
				took = true
				break
			}
		}
		if !took {
			t.Fatalf("no member took %q", leaf)
		}
		compare(fmt.Sprintf("m%d after leaf.m%d was added on its member", i, i), []dnsdiff.Query{
			{Name: fmt.Sprintf("m%d.%s", i, origin), Type: dns.TypeTXT},
			{Name: fmt.Sprintf("nx.m%d.%s", i, origin), Type: dns.TypeTXT},
		})
	}
	// A wildcard, and a deeper closest encloser under it.
	for _, rr := range []string{"*.wnew." + origin + " 300 IN TXT \"new wildcard\"", "deep.sub.wnew." + origin + " 300 IN A 192.0.2.99"} {
		for _, a := range []harness.API{single, rt.client()} {
			if code := post(a, []string{rr}, nil); code != http.StatusOK {
				t.Fatalf("adding %q: %d", rr, code)
			}
		}
	}
	compare("names under a new wildcard", []dnsdiff.Query{
		{Name: "foo.wnew." + origin, Type: dns.TypeTXT},
		{Name: "a.b.wnew." + origin, Type: dns.TypeTXT},
		{Name: "nx.sub.wnew." + origin, Type: dns.TypeTXT},
		{Name: "sub.wnew." + origin, Type: dns.TypeTXT},
	})
	// Deleted: the filters still hold the names, the answers are right.
	for _, a := range []harness.API{single, rt.client()} {
		if code := post(a, nil, []any{map[string]string{"name": "leaf.e0." + origin}}); code != http.StatusOK {
			t.Fatalf("deleting leaf.e0: %d", code)
		}
	}
	compare("e0 after its leaf was deleted", []dnsdiff.Query{{Name: "e0." + origin, Type: dns.TypeA}, {Name: "leaf.e0." + origin, Type: dns.TypeA}})

	// The zone replaced: its sets are dropped and fetched again.
	text2, queries2 := dnsdiff.GenerateZone(origin, 55, 3000)
	putZone(t, single, origin, text2)
	putZone(t, rt.client(), origin, text2)
	compare("the replaced zone's queries", sampleQueries(queries2, 3))
	harness.Eventually(t, "the replaced zone's filters in use", 30*time.Second, func() bool {
		before := metric(rt, "coredns_craftroute_filter_skips_total")
		harness.Query(rt.addr(), madeUp(1)[0].Name, dns.TypeA)
		return metric(rt, "coredns_craftroute_filter_skips_total") > before
	})
	compare("the replaced zone's queries, filters in use", append(sampleQueries(queries2, 3), madeUp(50)...))

	// What the router keeps: one set (three shards' filters of about a
	// thousand names each, and its 32 KiB filter of noticed names), the
	// sets it dropped given back.
	if b := metric(rt, "coredns_craftroute_filter_bytes"); b <= 32<<10 || b > 64<<10 {
		t.Errorf("the router keeps %v bytes of filters, expected one set: over 32 KiB, at most 64 KiB", b)
	}
}
