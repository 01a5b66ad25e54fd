package replica

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/craftdns/craftdns/internal/dnsdiff"
	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"
	"github.com/craftdns/craftdns/plugin/craftstore/zone"

	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
)

// msgText is a response's rcode, AA and sections, each sorted.
func msgText(m *dns.Msg) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s aa=%v\n", dns.RcodeToString[m.Rcode], m.Authoritative)
	for _, sec := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		var lines []string
		for _, rr := range sec {
			lines = append(lines, rr.String())
		}
		sort.Strings(lines)
		b.WriteString(strings.Join(lines, "\n") + "\n--\n")
	}
	return b.String()
}

// sameAnswers fails when a member's view answers a query otherwise than
// a view of the member's file held in memory.
func sameAnswers(t *testing.T, what string, r *Replica, origin string, queries []dnsdiff.Query) {
	t.Helper()
	got := r.Zone(origin)
	if got == nil {
		t.Fatalf("%s: member %d holds no %s", what, r.ID(), origin)
	}
	var want *zone.Zone
	if err := r.db.View(func(tx *bolt.Tx) error {
		var err error
		want, err = loadMemory(fsm.Generation(tx), origin)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got.Paged() {
		// A paged view reads the file, which holds a batch of changes
		// the moment it commits; their counts follow when the batch's
		// effects are applied, just after (before the applied index
		// moves). A member catching up applies many changes at once.
		deadline := time.Now().Add(10 * time.Second)
		for (got.Records() != want.Records() || got.Names() != want.Names()) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if got.Records() != want.Records() || got.Names() != want.Names() {
			t.Errorf("%s: member %d counts %d records at %d names, the file %d at %d", what, r.ID(), got.Records(), got.Names(), want.Records(), want.Names())
		}
	}
	bad := 0
	for _, q := range queries {
		a, b := new(dns.Msg), new(dns.Msg)
		want.Lookup(a, q.Name, q.Type)
		got.Lookup(b, q.Name, q.Type)
		if msgText(a) != msgText(b) {
			if bad++; bad <= 3 {
				t.Errorf("%s: member %d, %v:\nwant\n%sgot\n%s", what, r.ID(), q, msgText(a), msgText(b))
			}
		}
	}
	if bad > 0 {
		t.Errorf("%s: member %d: %d of %d answers differ", what, r.ID(), bad, len(queries))
	}
}

// TestPagedMembers: members in paged mode answer from the bbolt file as a
// view of it held in memory answers, after an import, after changes, after
// a restart, after a snapshot installed, and after switching modes across
// a restart; their counts follow the changes.
func TestPagedMembers(t *testing.T) {
	const origin = "example.com."
	c := &testCluster{t: t, dir: t.TempDir(), members: map[uint64]*Replica{}, snap: 40, paged: 64}
	c.addPeers(3)
	c.startAll()
	text, queries := dnsdiff.GenerateZone(origin, 7, 600)
	if _, err := c.leader().PutZone(ctx(t), origin, dnsdiff.ParseZone(t, origin, text), false); err != nil {
		t.Fatal(err)
	}
	check := func(what string, paged bool) {
		t.Helper()
		eventually(t, what+": every member at the leader's serial", func() bool {
			s, _, _ := c.leader().Zone(origin).Serial()
			for _, r := range c.members {
				z := r.Zone(origin)
				if z == nil {
					return false
				}
				if got, _, _ := z.Serial(); got != s {
					return false
				}
			}
			return true
		})
		for _, r := range c.members {
			if r.Zone(origin).Paged() != (paged || r.cfg.PagedCache > 0) {
				t.Fatalf("%s: member %d paged %v", what, r.ID(), r.Zone(origin).Paged())
			}
			sameAnswers(t, what, r, origin, queries)
		}
	}
	check("after the import", true)

	// Changes, enough of them for snapshots.
	for i := range 60 {
		name := fmt.Sprintf("paged%d.deep.%s", i, origin)
		add := []dns.RR{mustRR(t, fmt.Sprintf("%s 60 IN A 192.0.2.%d", name, i+1))}
		if _, err := c.leader().Change(ctx(t), origin, add, nil); err != nil {
			t.Fatal(err)
		}
		queries = append(queries, dnsdiff.Query{Name: name, Type: dns.TypeA}, dnsdiff.Query{Name: "x." + name, Type: dns.TypeA})
	}
	queries = append(queries, dnsdiff.Query{Name: "deep." + origin, Type: dns.TypeA}, dnsdiff.Query{Name: origin, Type: dns.TypeSOA})
	check("after changes", true)

	// A restart, and a member that starts over from a snapshot.
	id := c.follower().ID()
	c.stop(id)
	c.start(id, false)
	check("after a restart", true)
	oid := c.follower().ID()
	c.stop(oid)
	for i := range 60 {
		name := fmt.Sprintf("late%d.%s", i, origin)
		add := []dns.RR{mustRR(t, fmt.Sprintf("%s 60 IN TXT \"%d\"", name, i))}
		if _, err := c.leader().Change(ctx(t), origin, add, nil); err != nil {
			t.Fatal(err)
		}
		queries = append(queries, dnsdiff.Query{Name: name, Type: dns.TypeTXT})
	}
	c.start(oid, false)
	check("after a snapshot", true)

	// Switched to memory mode across a restart, and back.
	c.paged = -1
	id = c.follower().ID()
	c.stop(id)
	c.start(id, false)
	check("one member in memory mode", false)
	c.paged = 64
	c.stop(id)
	c.start(id, false)
	check("paged again", true)

	// Deletes: the empty non-terminal above them goes with the last.
	for i := range 60 {
		name := fmt.Sprintf("paged%d.deep.%s", i, origin)
		if _, err := c.leader().Change(ctx(t), origin, nil, []Deletion{{Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	check("after deletes", true)
}

// BenchmarkPagedReply is one packed reply (AppendReply) from a member's
// view of a zone of 100,000 names, asked for its names in turn: in memory
// mode, and in paged mode with every name cached and with 1,000 (most
// answers then decode their name).
func BenchmarkPagedReply(b *testing.B) {
	for _, bc := range []struct {
		name  string
		paged int
	}{{"memory", -1}, {"paged", 1 << 20}, {"paged-small-cache", 1000}} {
		b.Run(bc.name, func(b *testing.B) {
			c := &testCluster{t: b, dir: b.TempDir(), members: map[uint64]*Replica{}, paged: bc.paged}
			c.addPeers(1)
			c.startAll()
			seed := parseTestZone(b)
			const n = 100000
			for i := range n {
				seed = append(seed, mustRR(b, fmt.Sprintf("seed-%d.example.org. 300 IN A 10.0.%d.%d", i, byte(i>>8), byte(i))))
			}
			if _, err := c.leader().PutZone(ctx(b), "example.org.", seed, false); err != nil {
				b.Fatal(err)
			}
			z := c.leader().Zone("example.org.")
			qs := make([]*dns.Msg, 4096)
			for i := range qs {
				qs[i] = new(dns.Msg)
				qs[i].SetQuestion(fmt.Sprintf("seed-%d.example.org.", (i*7919)%n), dns.TypeA)
			}
			buf := make([]byte, 0, 512)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if _, _, ok := z.AppendReply(buf[:0], qs[i%len(qs)], 1232); !ok {
					b.Fatal("not packed")
				}
			}
		})
	}
}
