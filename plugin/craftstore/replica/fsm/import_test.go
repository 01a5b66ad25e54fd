package fsm

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/craftdns/craftdns/internal/zonerules"

	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
)

// stream stages rrs as an import fed record by record does (replica.Import):
// each chunk of size checked by CheckImportChunk against what was staged
// before it and applied, then CheckStagedApex and CheckStagedDNAMEs reading
// piece names at a time. It returns the first refusal and the import's ID.
func stream(t *testing.T, db *bolt.DB, origin string, id uint64, rrs []dns.RR, size, piece int) error {
	t.Helper()
	if _, _, err := applyIn(t, db, &Command{Op: OpImportBegin, Zone: origin, Import: id}); err != nil {
		t.Fatal(err)
	}
	view := func(fn func(b *bolt.Bucket) error) error {
		var err error
		if verr := db.View(func(tx *bolt.Tx) error {
			b := StagedImport(Generation(tx), origin, id)
			if b == nil {
				t.Fatalf("import %d is not the current one", id)
			}
			err = fn(b)
			return nil
		}); verr != nil {
			t.Fatal(verr)
		}
		return err
	}
	for len(rrs) > 0 {
		chunk := rrs[:min(size, len(rrs))]
		rrs = rrs[len(chunk):]
		if err := view(func(b *bolt.Bucket) error { return CheckImportChunk(b, origin, chunk) }); err != nil {
			return err
		}
		if _, _, err := applyIn(t, db, &Command{Op: OpImportChunk, Zone: origin, Import: id, Add: chunk}); err != nil {
			t.Fatalf("a chunk the import's check passed was refused: %v", err)
		}
	}
	if err := view(func(b *bolt.Bucket) error { return CheckStagedApex(b, origin) }); err != nil {
		return err
	}
	var from, owner []byte
	for first := true; first || from != nil; first = false {
		if err := view(func(b *bolt.Bucket) (err error) {
			from, owner, err = CheckStagedDNAMEs(b, from, owner, piece)
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

// TestImportChecksEqualCheckZone: an import checked chunk by chunk and then
// as staged refuses exactly the zones zonerules.CheckZone refuses, with its
// message when the zone has one fault, however the zone is cut into chunks
// and pieces.
func TestImportChecksEqualCheckZone(t *testing.T) {
	const head = "example.org. 300 IN SOA ns1.example.org. h.example.org. 1 7200 3600 1209600 300\nexample.org. 300 IN NS ns1.example.org.\n"
	for _, c := range []struct {
		name, zone string
	}{
		{"valid", head + "ns1 A 192.0.2.1\na A 192.0.2.2\nab A 192.0.2.3\nalias CNAME a\nd DNAME elsewhere.net.\nda A 192.0.2.4\nd0 A 192.0.2.5\nalias CNAME a\n*.w TXT \"x\"\nsub NS ns.sub\nns.sub A 192.0.2.9"},
		{"CNAME beside data", head + "a A 192.0.2.1\nb A 192.0.2.2\nc A 192.0.2.2\na CNAME b"},
		{"two CNAMEs", head + "a CNAME b\nb A 192.0.2.2\nc A 192.0.2.2\na CNAME c"},
		{"two SOAs", head + "a A 192.0.2.1\nexample.org. 300 IN SOA ns1.example.org. h.example.org. 2 7200 3600 1209600 300"},
		{"SOA below the apex", head + "a SOA ns1.example.org. h.example.org. 1 7200 3600 1209600 300"},
		{"name below a DNAME", head + "d DNAME elsewhere.net.\nx A 192.0.2.1\na.d A 192.0.2.1"},
		{"name below a DNAME, before it", head + "a.b.d A 192.0.2.1\nx A 192.0.2.1\nd DNAME elsewhere.net."},
		{"DNAME at the apex above names", head + "a A 192.0.2.1\nexample.org. 300 IN DNAME elsewhere.net."},
		{"two DNAMEs", head + "d DNAME a.net.\nx A 192.0.2.1\nd DNAME b.net."},
		{"DNAME beside NS", head + "d DNAME a.net.\nx A 192.0.2.1\nd NS ns.d"},
		{"no NS", "example.org. 300 IN SOA ns1.example.org. h.example.org. 1 7200 3600 1209600 300\na A 192.0.2.1"},
		{"no SOA", "example.org. 300 IN NS ns1.example.org.\na A 192.0.2.1"},
		{"CNAME at the apex", head + "example.org. 300 IN CNAME a\na A 192.0.2.1"},
		{"outside the zone", head + "a A 192.0.2.1\nexample.net. 300 IN A 192.0.2.1"},
		{"class CH", head + "a 300 CH A 192.0.2.1"},
	} {
		var rrs []dns.RR
		zp := dns.NewZoneParser(strings.NewReader(c.zone), "example.org.", "")
		for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
			rrs = append(rrs, rr)
		}
		if err := zp.Err(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		want := zonerules.CheckZone("example.org.", rrs)
		for _, size := range []int{1, 2, 3, len(rrs)} {
			for _, piece := range []int{1, 2, 1000} {
				db := openGeneration(t)
				got := stream(t, db, "example.org.", 7, rrs, size, piece)
				if (got == nil) != (want == nil) {
					t.Errorf("%s, chunks of %d, pieces of %d: import %v, CheckZone %v", c.name, size, piece, got, want)
				} else if got != nil && got.Error() != want.Error() {
					t.Errorf("%s, chunks of %d, pieces of %d: import %q, CheckZone %q", c.name, size, piece, got, want)
				}
			}
		}
	}
}

// TestImportAbort: an empty import that supersedes an unfinished one and
// commits is refused at its apex and drops itself: neither import is left,
// and the zone is as it was (replica.Import.Abort).
func TestImportAbort(t *testing.T) {
	db := openGeneration(t)
	zone := []dns.RR{soaRR(t, 5), mustRR(t, "example.org. 300 IN NS ns1.example.org."), mustRR(t, "a.example.org. 300 IN A 192.0.2.1")}
	for _, c := range []*Command{
		{Op: OpImportBegin, Zone: "example.org.", Import: 1},
		{Op: OpImportChunk, Zone: "example.org.", Import: 1, Add: zone},
		{Op: OpImportCommit, Zone: "example.org.", Import: 1},
		{Op: OpImportBegin, Zone: "example.org.", Import: 2},
		{Op: OpImportChunk, Zone: "example.org.", Import: 2, Add: []dns.RR{mustRR(t, "b.example.org. 300 IN A 192.0.2.2")}},
	} {
		if _, _, err := applyIn(t, db, c); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := applyIn(t, db, &Command{Op: OpImportBegin, Zone: "example.org.", Import: 3}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := applyIn(t, db, &Command{Op: OpImportCommit, Zone: "example.org.", Import: 3}); err == nil {
		t.Fatal("the empty import committed")
	}
	db.View(func(tx *bolt.Tx) error {
		g := Generation(tx)
		if g.Bucket(bucketImports).Bucket([]byte("example.org.")) != nil || g.Bucket(bucketImportMeta).Get([]byte("example.org.")) != nil {
			t.Error("an import is left")
		}
		zb := g.Bucket(BucketZones).Bucket([]byte("example.org."))
		a, _ := RRsAt(zb, "a.example.org.")
		b, _ := RRsAt(zb, "b.example.org.")
		if len(a) != 1 || len(b) != 0 {
			t.Errorf("the zone changed: a %v, b %v", a, b)
		}
		return nil
	})
}

// zoneContents returns every key and value of zone's bucket in g.
func zoneContents(t *testing.T, db *bolt.DB, zone string) map[string]string {
	t.Helper()
	out := map[string]string{}
	db.View(func(tx *bolt.Tx) error {
		zb := Generation(tx).Bucket(BucketZones).Bucket([]byte(zone))
		if zb == nil {
			t.Fatalf("no zone %s", zone)
		}
		return zb.ForEach(func(k, v []byte) error {
			out[string(k)] = string(v)
			return nil
		})
	})
	return out
}

// TestImportCommitMoveEqualsCopy: an import whose chunks were applied in
// earlier transactions commits by moving its staged bucket, one staged in
// the commit's own transaction (a follower catching up) by copying it:
// both leave the same zone, replacing one or creating it, and no staging.
func TestImportCommitMoveEqualsCopy(t *testing.T) {
	zone := func(serial uint32, n int) []dns.RR {
		rrs := []dns.RR{soaRR(t, serial), mustRR(t, "example.org. 300 IN NS ns1.example.org.")}
		for i := range n {
			rrs = append(rrs, mustRR(t, fmt.Sprintf("h%d.example.org. 300 IN A 192.0.2.%d", i, i%250)))
		}
		return rrs
	}
	run := func(oneTx bool) (*bolt.DB, []Result) {
		db := openGeneration(t)
		var results []Result
		for i, z := range [][]dns.RR{zone(5, 300), zone(3, 500)} { // the second's serial is bumped past the first's
			id := uint64(i + 1)
			cs := []*Command{{Op: OpImportBegin, Zone: "example.org.", Import: id}}
			for len(z) > 0 {
				n := min(128, len(z))
				cs = append(cs, &Command{Op: OpImportChunk, Zone: "example.org.", Import: id, Add: z[:n]})
				z = z[n:]
			}
			cs = append(cs, &Command{Op: OpImportCommit, Zone: "example.org.", Import: id})
			if oneTx {
				err := db.Update(func(tx *bolt.Tx) error {
					for _, c := range cs {
						res, _, err := Apply(Generation(tx), c, 10)
						if err != nil {
							return err
						}
						if c.Op == OpImportCommit {
							if !stagedHere(Generation(tx), "example.org.") {
								t.Error("the commit in the staging transaction does not know it")
							}
							results = append(results, res)
						}
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				continue
			}
			for _, c := range cs {
				res, _, err := applyIn(t, db, c)
				if err != nil {
					t.Fatal(err)
				}
				if c.Op == OpImportCommit {
					results = append(results, res)
				}
			}
		}
		return db, results
	}
	moved, mres := run(false)
	copied, cres := run(true)
	if fmt.Sprint(mres) != fmt.Sprint(cres) || mres[1].Records != 502 || mres[1].Serial != 6 {
		t.Errorf("results: moved %+v, copied %+v", mres, cres)
	}
	m, c := zoneContents(t, moved, "example.org."), zoneContents(t, copied, "example.org.")
	if len(m) != 501 || fmt.Sprint(m) != fmt.Sprint(c) {
		t.Errorf("the moved zone (%d names) differs from the copied one (%d)", len(m), len(c))
		for k, v := range m {
			if c[k] != v {
				t.Errorf("%q: moved %x, copied %x", k, v, c[k])
			}
		}
	}
	for _, db := range []*bolt.DB{moved, copied} {
		db.View(func(tx *bolt.Tx) error {
			if Importing(Generation(tx), "example.org.") || Generation(tx).Bucket(bucketImports).Bucket([]byte("example.org.")) != nil {
				t.Error("a staging bucket is left")
			}
			for err := range tx.Check() {
				t.Errorf("bbolt's check: %v", err)
			}
			return nil
		})
	}
	// A transaction that staged and rolled back leaves nothing the next
	// one takes for its own.
	db := openGeneration(t)
	db.Update(func(tx *bolt.Tx) error {
		noteStaged(Generation(tx), "example.org.")
		return errors.New("roll back")
	})
	db.Update(func(tx *bolt.Tx) error {
		if stagedHere(Generation(tx), "example.org.") {
			t.Error("a rolled back transaction's staging counts in the next")
		}
		return nil
	})
}
