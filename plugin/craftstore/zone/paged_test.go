package zone

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/craftdns/craftdns/internal/dnsdiff"
	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/policy"

	"github.com/miekg/dns"
)

// memStorage is a zone's storage for tests: records packed per name under
// canonical keys, as craftstore's bbolt file holds them, one state at a
// time.
type memStorage struct {
	mu    sync.Mutex
	names map[string][]byte // canonical name → packed records
	keys  [][]byte          // the names' canonical keys, sorted
}

func newMemStorage(t testing.TB, origin, text string) *memStorage {
	t.Helper()
	by := map[string][]dns.RR{}
	for _, rr := range dnsdiff.ParseZone(t, origin, text) {
		n := dnsname.Lower(rr.Header().Name)
		by[n] = append(by[n], rr)
	}
	s := &memStorage{}
	s.replace(t, by)
	return s
}

// replace makes names the stored state (nil records: none at the name).
func (s *memStorage) replace(t testing.TB, by map[string][]dns.RR) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A new state: reads begun before keep the one they read.
	names := make(map[string][]byte, len(s.names)+len(by))
	for k, v := range s.names {
		names[k] = v
	}
	s.names = names
	for n, rrs := range by {
		if len(rrs) == 0 {
			delete(s.names, n)
			continue
		}
		var buf []byte
		for _, rr := range rrs {
			b := make([]byte, dns.Len(rr)+64)
			off, err := dns.PackRR(rr, b, 0, nil, false)
			if err != nil {
				t.Fatal(err)
			}
			buf = append(buf, byte(off>>8), byte(off))
			buf = append(buf, b[:off]...)
		}
		s.names[n] = buf
	}
	s.keys = nil
	for n := range s.names {
		s.keys = append(s.keys, dnsname.CanonicalKey(n))
	}
	slices.SortFunc(s.keys, bytes.Compare)
}

func decodeMem(val []byte) ([]dns.RR, error) {
	var out []dns.RR
	for len(val) > 0 {
		if len(val) < 2 {
			return nil, errors.New("short")
		}
		l := int(val[0])<<8 | int(val[1])
		rr, _, err := dns.UnpackRR(val[2:2+l], 0)
		if err != nil {
			return nil, err
		}
		out = append(out, rr)
		val = val[2+l:]
	}
	return out, nil
}

// memPages is one state of a memStorage.
type memPages struct {
	names map[string][]byte
	keys  [][]byte
}

func (p memPages) Get(name []byte) []byte { return p.names[string(name)] }

func (p memPages) End() {}

func (p memPages) Below(name []byte, skip func([]byte) bool) bool {
	k := dnsname.CanonicalKey(string(name))
	i := sort.Search(len(p.keys), func(i int) bool { return bytes.Compare(p.keys[i], k) > 0 })
	for ; i < len(p.keys) && bytes.HasPrefix(p.keys[i], k); i++ {
		if skip == nil || !skip([]byte(keyName(p.keys[i]))) {
			return true
		}
	}
	return false
}

// keyName is the name of a canonical key.
func keyName(k []byte) string {
	labels := strings.Split(strings.TrimSuffix(string(k), "\x00"), "\x00")
	slices.Reverse(labels)
	return strings.Join(labels, ".") + "."
}

func (s *memStorage) storage() Storage {
	return Storage{
		Read: func() (Pages, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			return memPages{s.names, s.keys}, nil
		},
		Decode: decodeMem,
	}
}

// answerText is everything of a response to compare: rcode, AA, and each
// section's records sorted.
func answerText(m *dns.Msg) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s aa=%v\n", dns.RcodeToString[m.Rcode], m.Authoritative)
	for _, sec := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		var lines []string
		for _, rr := range sec {
			lines = append(lines, rr.String())
		}
		sort.Strings(lines)
		b.WriteString(strings.Join(lines, "\n"))
		b.WriteString("\n--\n")
	}
	return b.String()
}

// comparePaged asks a zone held in memory and a paged one over the same
// records each query, as a lookup and as a partition, and fails on any
// difference.
func comparePaged(t *testing.T, what string, mem, paged *Zone, queries []dnsdiff.Query) {
	t.Helper()
	bad := 0
	for _, q := range queries {
		for _, part := range []bool{false, true} {
			r := new(dns.Msg)
			r.SetQuestion(q.Name, q.Type)
			a, b := new(dns.Msg), new(dns.Msg)
			a.SetReply(r)
			b.SetReply(r)
			var fa, fb any
			if part {
				fa, fb = mem.Partition(a, dnsname.Lower(q.Name), q.Type), paged.Partition(b, dnsname.Lower(q.Name), q.Type)
			} else {
				mem.Lookup(a, q.Name, q.Type)
				paged.Lookup(b, q.Name, q.Type)
			}
			if answerText(a) != answerText(b) || fa != fb {
				bad++
				if bad <= 5 {
					t.Errorf("%s: %v (partition %v): memory\n%s%v\npaged\n%s%v", what, q, part, answerText(a), fa, answerText(b), fb)
				}
			}
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d answers differ", what, bad, 2*len(queries))
	}
}

// TestPagedEqualsMemory: a paged zone answers every generated query, and
// the test tables' (wildcards, empty non-terminals, delegations and glue,
// CNAME and DNAME chains, NXDOMAIN and NODATA), as the same zone held in
// memory, with a cache big enough for all of it and with the smallest.
func TestPagedEqualsMemory(t *testing.T) {
	type zt struct {
		origin, text string
		queries      []dnsdiff.Query
	}
	var zones []zt
	for _, seed := range []int64{1, 2, 3} {
		text, queries := dnsdiff.GenerateZone("example.com.", seed, dnsdiff.DefaultNames)
		zones = append(zones, zt{"example.com.", text, queries})
	}
	zones = append(zones,
		zt{"example.", rfc4592Zone, casesQueries(rfc4592Cases)},
		zt{"example.org.", exampleOrg, casesQueries(lookupCases)},
		zt{"example.org.", dnameOrg, casesQueries(dnameCases)},
		zt{"net.", dnameApex, casesQueries(dnameApexCases)},
		zt{"uni.com.", dnameUp, casesQueries(dnameUpCases)},
		zt{"bar.", dnameUpBar, casesQueries(dnameUpBarCases)},
	)
	for _, z := range zones {
		mem := load(t, z.origin, z.text)
		st := newMemStorage(t, z.origin, z.text)
		for _, cache := range []int{1 << 20, 0} {
			paged := NewPaged(z.origin, st.storage(), cache)
			comparePaged(t, fmt.Sprintf("%s cache %d", z.origin, cache), mem, paged, z.queries)
			comparePaged(t, fmt.Sprintf("%s cache %d, again", z.origin, cache), mem, paged, z.queries)
		}
	}
}

// TestPagedFollowsStorage: a paged zone answers from the state its storage
// holds at each read, its cache included (a changed name is decoded
// anew); Set keeps the counts and the policy names; With previews changes
// over the storage as a zone in memory does.
func TestPagedFollowsStorage(t *testing.T) {
	const origin = "example.org."
	st := newMemStorage(t, origin, exampleOrg)
	mem := load(t, origin, exampleOrg)
	paged := NewPaged(origin, st.storage(), 0)
	paged.SetCounts(mem.Records(), mem.Names())
	queries := casesQueries(lookupCases)
	comparePaged(t, "before", mem, paged, queries)

	rr := func(s string) dns.RR {
		r, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	pol := rr(`www.example.org. 60 IN TYPE65380 \# 2 0102`)
	changes := []NameRecords{
		{Name: "www.example.org.", RRs: []dns.RR{rr("www.example.org. 60 IN A 192.0.2.99"), pol}, Old: len(mem.RRs("www.example.org.", 0))},
		{Name: "new.deep.example.org.", RRs: []dns.RR{rr("new.deep.example.org. 60 IN TXT \"n\"")}},
		{Name: "*.wild.example.org.", RRs: []dns.RR{rr("*.wild.example.org. 60 IN A 192.0.2.7")}},
		{Name: "example.org.", RRs: append(slices.DeleteFunc(mem.RRs("example.org.", 0), func(r dns.RR) bool { return r.Header().Rrtype == dns.TypeSOA }),
			rr("example.org. 3600 IN SOA ns1.example.org. hostmaster.example.org. 99 7200 3600 1209600 300")), Old: len(mem.RRs("example.org.", 0))},
	}
	// The preview first: over the storage as it is.
	pm, pp := mem.With(changes), paged.With(changes)
	extra := append(slices.Clone(queries),
		dnsdiff.Query{Name: "www.example.org.", Type: dns.TypeA}, dnsdiff.Query{Name: "deep.example.org.", Type: dns.TypeA},
		dnsdiff.Query{Name: "x.deep.example.org.", Type: dns.TypeA}, dnsdiff.Query{Name: "q.wild.example.org.", Type: dns.TypeA},
		dnsdiff.Query{Name: "example.org.", Type: dns.TypeSOA}, dnsdiff.Query{Name: "nothere.example.org.", Type: dns.TypeA})
	comparePaged(t, "preview", pm, pp, extra)
	comparePaged(t, "not changed by the preview", mem, paged, extra)

	by := map[string][]dns.RR{}
	for _, c := range changes {
		by[c.Name] = c.RRs
	}
	st.replace(t, by)
	mem.Set(changes)
	paged.Set(changes)
	comparePaged(t, "after", mem, paged, extra)
	if paged.Records() != mem.Records() || paged.Names() != mem.Names() {
		t.Errorf("counts: paged %d records at %d names, memory %d at %d", paged.Records(), paged.Names(), mem.Records(), mem.Names())
	}
	var got []string
	paged.Policies(func(name string, rrs []dns.RR) bool {
		got = append(got, name)
		if len(rrs) != 1 || rrs[0].Header().Rrtype != policy.TypePolicy {
			t.Errorf("policies of %s: %v", name, rrs)
		}
		return true
	})
	if !slices.Equal(got, []string{"www.example.org."}) {
		t.Errorf("policy names: %v", got)
	}
	if s, _, ok := paged.Serial(); !ok || s != 99 {
		t.Errorf("serial %d %v, expected 99", s, ok)
	}
	paged.SetSerialBase(90)
	if s, b, ok := paged.Serial(); !ok || s != 99 || b != 90 {
		t.Errorf("serial %d base %d %v, expected 99 and 90", s, b, ok)
	}
	for _, name := range []string{"www.example.org.", "deep.example.org.", "new.deep.example.org.", "none.example.org."} {
		r1, b1 := mem.Node(name)
		r2, b2 := paged.Node(name)
		if r1 != r2 || b1 != b2 {
			t.Errorf("Node(%s): memory %v %v, paged %v %v", name, r1, b1, r2, b2)
		}
		if fmt.Sprint(mem.RRs(name, 0)) != fmt.Sprint(paged.RRs(name, 0)) {
			t.Errorf("RRs(%s): memory %v, paged %v", name, mem.RRs(name, 0), paged.RRs(name, 0))
		}
	}
	// Deleting a name below an empty non-terminal takes the ENT away too.
	del := []NameRecords{{Name: "new.deep.example.org.", Old: 1}}
	st.replace(t, map[string][]dns.RR{"new.deep.example.org.": nil})
	mem.Set(del)
	paged.Set(del)
	comparePaged(t, "after a delete", mem, paged, extra)

	// A storage that cannot be read answers SERVFAIL.
	broken := NewPaged(origin, Storage{Read: func() (Pages, error) { return nil, errors.New("closed") }, Decode: decodeMem}, 0)
	m := new(dns.Msg)
	broken.Lookup(m, "www.example.org.", dns.TypeA)
	if m.Rcode != dns.RcodeServerFailure {
		t.Errorf("unreadable storage: %s, expected SERVFAIL", dns.RcodeToString[m.Rcode])
	}
}

// TestPagedAppendReply: a paged zone packs the same replies as the zone
// held in memory, byte for byte, and leaves the same queries to Lookup.
func TestPagedAppendReply(t *testing.T) {
	type corpus struct {
		origin, text string
		queries      []dnsdiff.Query
	}
	corpora := []corpus{
		{"example.org.", exampleOrg, casesQueries(lookupCases)},
		{"example.", rfc4592Zone, casesQueries(rfc4592Cases)},
	}
	for _, seed := range []int64{1, 2} {
		text, queries := dnsdiff.GenerateZone("example.com.", seed, dnsdiff.DefaultNames)
		corpora = append(corpora, corpus{"example.com.", text, queries})
	}
	packed := 0
	for _, c := range corpora {
		mem := load(t, c.origin, c.text)
		paged := NewPaged(c.origin, newMemStorage(t, c.origin, c.text).storage(), 0)
		for round := range 2 { // the cache cold, then warm
			for _, q := range c.queries {
				r := new(dns.Msg)
				r.SetQuestion(q.Name, q.Type)
				r.SetEdns0(1232, false)
				a, _, okA := mem.AppendReply(nil, r, 1232)
				b, _, okB := paged.AppendReply(nil, r, 1232)
				if okA != okB || !bytes.Equal(a, b) {
					t.Errorf("%s round %d, %v: memory packed %v (%d bytes), paged %v (%d bytes)", c.origin, round, q, okA, len(a), okB, len(b))
				}
				if okB {
					packed++
				}
			}
		}
	}
	if packed == 0 {
		t.Error("a paged zone packed no reply")
	}
}

// TestPagedChainIdentity: within one read a name asked again is the same
// node, decoded once, so that a CNAME loop ends where a zone in memory
// ends it and a DNAME's RRset appears once, even when the cache keeps
// nothing (a name evicted between two steps of a chain).
func TestPagedChainIdentity(t *testing.T) {
	const origin = "loop.example."
	text := `$ORIGIN loop.example.
@    300 IN SOA ns1 hostmaster 1 7200 3600 1209600 300
@    300 IN NS  ns1
ns1  300 IN A   192.0.2.53
*.wl 600 IN CNAME loop.wl
loop.wl 600 IN CNAME loop.wl
a    300 IN CNAME b
b    300 IN CNAME a
up   300 IN DNAME loop.example.
`
	mem := load(t, origin, text)
	paged := NewPaged(origin, newMemStorage(t, origin, text).storage(), 0)
	paged.pg.cache = &nodeCache{} // keeps nothing
	var queries []dnsdiff.Query
	for _, n := range []string{"*.wl", "x.wl", "loop.wl", "a", "b", "www.up.up", "a.up.up"} {
		for _, qt := range []uint16{dns.TypeA, dns.TypeCNAME, dns.TypeANY} {
			queries = append(queries, dnsdiff.Query{Name: n + "." + origin, Type: qt})
		}
	}
	comparePaged(t, "no cache", mem, paged, queries)
}
