package fsm

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/craftdns/craftdns/internal/zonerules"

	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
)

// fuzzUpdateZone is the zone FuzzUpdate updates: a CNAME, a wildcard, a
// delegation with glue, an RRset of two and an empty non-terminal.
const fuzzUpdateZone = `$ORIGIN example.org.
@ 300 IN SOA ns1 hostmaster 1 7200 3600 1209600 60
@ 300 IN NS ns1
@ 300 IN NS ns2
ns1 300 IN A 192.0.2.53
ns2 300 IN A 192.0.2.54
www 300 IN A 192.0.2.10
www 300 IN A 192.0.2.11
alias 300 IN CNAME www
* 300 IN TXT "wild"
sub 300 IN NS ns.sub
ns.sub 300 IN A 192.0.2.99
a.b.c 300 IN MX 10 www
`

var errRollback = errors.New("rolled back")

// FuzzUpdate runs RFC 2136 processing on fuzzed messages: the form checks
// the UPDATE path makes (CheckUpdate), the replicated command's encoding,
// then the prerequisites and updates on a real bbolt state, rolled back
// after each input. Applying never fails but by a refusal, even for what
// CheckUpdate refuses: an entry every member fails to apply stops the group. Whatever an update does, the zone must stay one a
// member accepts (zonerules.CheckZone: one SOA, apex NS, no CNAME beside
// other data), the serial must move forward exactly when records changed,
// and the same updates applied again must change nothing but the serial
// (RFC 2136's operations are idempotent).
func FuzzUpdate(f *testing.F) {
	const origin = "example.org."
	rr := func(s string) dns.RR { return mustRR(f, s) }
	add := func(m *dns.Msg) []byte {
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	seed := func(build func(m *dns.Msg)) {
		m := new(dns.Msg)
		m.SetUpdate(origin)
		build(m)
		f.Add(add(m))
	}
	seed(func(m *dns.Msg) { m.Insert([]dns.RR{rr("new.example.org. 60 IN A 192.0.2.1")}) })
	seed(func(m *dns.Msg) {
		m.NameUsed([]dns.RR{rr("www.example.org. 0 IN A 0.0.0.0")})
		m.RemoveRRset([]dns.RR{rr("www.example.org. 0 IN A 0.0.0.0")})
		m.Insert([]dns.RR{rr("www.example.org. 60 IN CNAME alias.example.org.")})
	})
	seed(func(m *dns.Msg) {
		m.RRsetNotUsed([]dns.RR{rr("x.example.org. 0 IN TXT \"\"")})
		m.Insert([]dns.RR{rr("alias.example.org. 60 IN TXT \"beside a CNAME\"")})
		m.Insert([]dns.RR{rr("alias.example.org. 60 IN CNAME ns1.example.org.")})
	})
	seed(func(m *dns.Msg) {
		m.Used([]dns.RR{rr("www.example.org. 0 IN A 192.0.2.10")})
		m.Remove([]dns.RR{rr("example.org. 0 IN NS ns1.example.org."), rr("example.org. 0 IN NS ns2.example.org.")})
		m.RemoveName([]dns.RR{rr("example.org. 0 IN A 0.0.0.0")})
	})
	seed(func(m *dns.Msg) {
		m.NameNotUsed([]dns.RR{rr("q.example.org. 0 IN A 0.0.0.0")})
		m.Insert([]dns.RR{rr("example.org. 300 IN SOA ns1.example.org. hostmaster.example.org. 7 7200 3600 1209600 60")})
		m.Insert([]dns.RR{rr("*.example.org. 30 IN TXT \"wild\"")})
		m.RemoveName([]dns.RR{rr("sub.example.org. 0 IN A 0.0.0.0")})
	})

	// The zone is imported as the log's import entries do, into a bare
	// bbolt file: no Raft node runs beside the fuzzer.
	db := openGeneration(f)
	zp := dns.NewZoneParser(strings.NewReader(fuzzUpdateZone), origin, "")
	var rrs []dns.RR
	for x, ok := zp.Next(); ok; x, ok = zp.Next() {
		rrs = append(rrs, x)
	}
	err := db.Update(func(tx *bolt.Tx) error {
		for _, c := range []*Command{
			{Op: OpImportBegin, Zone: origin, Import: 1},
			{Op: OpImportChunk, Zone: origin, Import: 1, Add: rrs},
			{Op: OpImportCommit, Zone: origin, Import: 1},
		} {
			if _, _, err := Apply(Generation(tx), c, 10); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		f.Fatal(err)
	}
	zoneRRs := func(g *bolt.Bucket) (soa *dns.SOA, rest []string, all []dns.RR) {
		g.Bucket(BucketZones).Bucket([]byte(origin)).ForEach(func(_, v []byte) error {
			rrs, err := DecodeRRs(v)
			if err != nil {
				f.Fatal(err)
			}
			for _, x := range rrs {
				all = append(all, x)
				if s, ok := x.(*dns.SOA); ok {
					soa = s
					continue
				}
				rest = append(rest, x.String())
			}
			return nil
		})
		return soa, rest, all
	}

	f.Fuzz(func(t *testing.T, msg []byte) {
		m := new(dns.Msg)
		if m.Unpack(msg) != nil || m.Opcode != dns.OpcodeUpdate || len(m.Question) != 1 ||
			dns.CanonicalName(m.Question[0].Name) != origin || m.Question[0].Qtype != dns.TypeSOA {
			return
		}
		checked, _ := CheckUpdate(origin, m.Answer, m.Ns)
		cmd := &Command{Op: OpUpdate, Zone: origin, Update: msg}
		b, err := cmd.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if cmd, err = Unmarshal(b); err != nil {
			t.Fatalf("a marshalled UPDATE command does not decode: %v", err)
		}
		db.Update(func(tx *bolt.Tx) error {
			g := Generation(tx)
			soa0, before, _ := zoneRRs(g)
			res, _, err := Apply(g, cmd, 10)
			var refused *Error
			if errors.As(err, &refused) && checked != dns.RcodeSuccess {
				return errRollback
			}
			if errors.As(err, &refused) {
				// Refused for what the zone holds, which no check of the
				// message alone sees (a DNAME above names, RFC 6672
				// section 2.3): every member refuses the entry alike, with
				// an error rcode, and nothing changes.
				if res.Rcode == dns.RcodeSuccess {
					t.Fatalf("refused with rcode NOERROR: %v", err)
				}
				if _, after, _ := zoneRRs(g); strings.Join(after, "\n") != strings.Join(before, "\n") {
					t.Fatalf("refused (%v), and the zone changed", err)
				}
				return errRollback
			}
			if err != nil {
				// The member's apply would fail on this entry, and so
				// would every other member's: the group stops.
				t.Fatalf("apply: %v", err)
			}
			if checked != dns.RcodeSuccess {
				// Refused on the UPDATE path; an entry from before a
				// check may still hold it, and applies without failing.
				return errRollback
			}
			soa1, after, all := zoneRRs(g)
			if err := zonerules.CheckZone(origin, all); err != nil {
				t.Fatalf("the zone after %v is refused: %v", m, err)
			}
			changed := strings.Join(before, "\n") != strings.Join(after, "\n")
			switch {
			case res.Rcode != dns.RcodeSuccess && (changed || soa1.Serial != soa0.Serial):
				t.Fatalf("rcode %s, and the zone changed", dns.RcodeToString[res.Rcode])
			case changed && !zonerules.SerialAfter(soa1.Serial, soa0.Serial):
				t.Fatalf("records changed, serial %d → %d", soa0.Serial, soa1.Serial)
			case res.Rcode == dns.RcodeSuccess && res.Serial != soa1.Serial:
				t.Fatalf("result serial %d, zone serial %d", res.Serial, soa1.Serial)
			}
			if res.Rcode != dns.RcodeSuccess {
				return errRollback
			}
			if soa1.Serial != soa0.Serial {
				checkJournal(t, g, origin, soa0, soa1, before, after)
			}
			if _, _, err := applyUpdate(g, cmd, applyOpts{skipPrereqs: true}); err != nil {
				t.Fatalf("apply again: %v", err)
			}
			if _, again, _ := zoneRRs(g); strings.Join(again, "\n") != strings.Join(after, "\n") {
				t.Fatalf("the same updates applied again changed the zone:\n%s\nthen\n%s", strings.Join(after, "\n"), strings.Join(again, "\n"))
			}
			return errRollback
		})
	})
}

// checkJournal: the journal's last change, the one an IXFR from soa0 gets,
// leads from the zone before (its SOA soa0, its other records before) to
// the zone after (soa1, after): the old SOA and what went, then the new SOA
// and what came (RFC 1995 section 4).
func checkJournal(t *testing.T, g *bolt.Bucket, origin string, soa0, soa1 *dns.SOA, before, after []string) {
	t.Helper()
	n := 0
	ok, err := journalChanges(g, origin, soa0.Serial, soa1.Serial, func(removed, added []dns.RR) error {
		n++
		if len(removed) == 0 || len(added) == 0 || removed[0].String() != soa0.String() || added[0].String() != soa1.String() {
			t.Fatalf("the journal's change does not lead from SOA %d to SOA %d: -%v +%v", soa0.Serial, soa1.Serial, removed, added)
		}
		zone := map[string]bool{}
		for _, s := range before {
			zone[s] = true
		}
		for _, rr := range removed[1:] {
			if !zone[rr.String()] {
				t.Fatalf("the journal removes %s, which the zone did not hold", rr)
			}
			delete(zone, rr.String())
		}
		for _, rr := range added[1:] {
			if zone[rr.String()] {
				t.Fatalf("the journal adds %s, which the zone held", rr)
			}
			zone[rr.String()] = true
		}
		want := map[string]bool{}
		for _, s := range after {
			want[s] = true
		}
		if !maps.Equal(zone, want) {
			t.Fatalf("the journal's change (-%v +%v) leads from\n%s\nto another zone than\n%s", removed, added,
				strings.Join(before, "\n"), strings.Join(after, "\n"))
		}
		return nil
	})
	if err != nil || !ok || n != 1 {
		t.Fatalf("the journal covers %d → %d: %v, %d changes, error %v", soa0.Serial, soa1.Serial, ok, n, err)
	}
}
