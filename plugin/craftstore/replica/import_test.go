package replica

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"

	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
)

// importZone returns a zone of n A records after its SOA and NS.
func importZone(t *testing.T, serial uint32, n int) []dns.RR {
	rrs := []dns.RR{
		mustRR(t, fmt.Sprintf("example.org. 300 IN SOA ns1.example.org. h.example.org. %d 7200 3600 1209600 300", serial)),
		mustRR(t, "example.org. 300 IN NS ns1.example.org."),
	}
	for i := range n {
		rrs = append(rrs, mustRR(t, fmt.Sprintf("h%d.example.org. 300 IN A 192.0.2.%d", i, i%250)))
	}
	return rrs
}

// importing reports whether member r holds an unfinished import of the
// zone.
func importing(t *testing.T, r *Replica, zone string) bool {
	t.Helper()
	var in bool
	if err := r.db.View(func(tx *bolt.Tx) error {
		in = fsm.Importing(fsm.Generation(tx), zone)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return in
}

// TestImportStream: an import fed record by record commits a zone of
// several chunks on every member; one whose fault shows only in a later
// chunk (a CNAME at a name an earlier chunk gave an address), below a
// DNAME staged earlier, or at the end (no NS) is refused as the whole-zone
// check refuses it (ErrInvalid), leaves the zone as it was and no staged
// import on any member.
func TestImportStream(t *testing.T) {
	c := newTestCluster(t, 3, 0)
	f := c.follower()
	const n = 3*importChunk + 17
	im := f.NewImport("example.org.", false, 0)
	for _, rr := range importZone(t, 10, n) {
		if err := im.Add(ctx(t), rr); err != nil {
			t.Fatal(err)
		}
	}
	res, err := im.Commit(ctx(t))
	im.Abort() // a no-op after a commit
	if err != nil {
		t.Fatal(err)
	}
	if res.Records != n+2 || res.Serial != 10 || im.Records() != n+2 || im.Serial() != 10 {
		t.Fatalf("committed %+v, the import added %d records of serial %d", res, im.Records(), im.Serial())
	}
	c.everywhere(fmt.Sprintf("h%d.example.org.", n-1), fmt.Sprintf("192.0.2.%d", (n-1)%250))

	for _, bad := range []struct {
		name string
		rrs  []dns.RR
		want string
	}{
		{"CNAME beside an address in a later chunk", append(importZone(t, 11, 2*importChunk), mustRR(t, "h5.example.org. 300 IN CNAME h6.example.org.")), "CNAME and other data"},
		{"a name below a DNAME of an earlier chunk", append(append(importZone(t, 11, 0), mustRR(t, "d.example.org. 300 IN DNAME example.net.")),
			importZone(t, 11, importChunk+5)[2:]...), ""},
		{"no NS", importZone(t, 11, importChunk+1)[:1], "no NS"},
	} {
		rrs := bad.rrs
		if bad.want == "" {
			rrs = append(rrs, mustRR(t, "x.d.example.org. 300 IN A 192.0.2.1"))
			bad.want = "below the DNAME"
		}
		if bad.name == "no NS" {
			rrs = append(rrs, importZone(t, 11, importChunk+1)[2:]...)
		}
		im := f.NewImport("example.org.", false, 0)
		err := feedImport(t, im, rrs)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: got %v, want an invalid zone (%s)", bad.name, err, bad.want)
		}
		for _, r := range c.members {
			eventually(t, "no staged import left", func() bool { return !importing(t, r, "example.org.") })
			if soa := r.Zone("example.org.").SOA(); soa == nil || soa.Serial != 10 {
				t.Errorf("%s: member %d serves serial %v", bad.name, r.ID(), soa)
			}
		}
	}

	// A zone of one chunk, or one refused in its first, writes nothing:
	// no import is begun.
	for _, rrs := range [][]dns.RR{
		append(importZone(t, 11, 3), mustRR(t, "h1.example.org. 300 IN CNAME h2.example.org.")),
		append(importZone(t, 11, 3), mustRR(t, "x.example.net. 300 IN A 192.0.2.1")),
		slices.Insert(importZone(t, 11, 2*importChunk), 2, mustRR(t, "x.example.net. 300 IN A 192.0.2.1")),
		importZone(t, 11, 3)[2:],
	} {
		im := f.NewImport("example.org.", false, 0)
		err := feedImport(t, im, rrs)
		if !errors.Is(err, ErrInvalid) || im.id != 0 {
			t.Errorf("a zone refused in its first chunk: %v, import %d begun", err, im.id)
		}
	}

	// Staged, the import stays for a shard map part to commit; another
	// import supersedes it, and its own next chunk then says so.
	im = f.NewImport("example.org.", false, 0)
	for _, rr := range importZone(t, 12, 10) {
		if err := im.Add(ctx(t), rr); err != nil {
			t.Fatal(err)
		}
	}
	id, err := im.Stage(ctx(t))
	im.Abort()
	if err != nil || id == 0 || !importing(t, f, "example.org.") {
		t.Fatalf("staged %d, %v; staged import kept: %v", id, err, importing(t, f, "example.org."))
	}
	other := f.NewImport("example.org.", false, 0)
	defer other.Abort()
	for _, rr := range importZone(t, 13, importChunk) {
		if err := other.Add(ctx(t), rr); err != nil {
			t.Fatal(err)
		}
	}
	_, err = f.PutZone(ctx(t), "example.org.", importZone(t, 14, 3), false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Commit(ctx(t)); !errors.Is(err, ErrConflict) {
		t.Errorf("a superseded import committed or failed otherwise: %v", err)
	}
	if soa := f.Zone("example.org.").SOA(); soa == nil || soa.Serial != 14 {
		t.Errorf("serial %v after the superseded import, want 14", soa)
	}
}

// feedImport adds rrs to im and commits it, stopping at the first error,
// then aborts it (a no-op after a commit) and returns the error.
func feedImport(t *testing.T, im *Import, rrs []dns.RR) error {
	t.Helper()
	var err error
	for _, rr := range rrs {
		if err = im.Add(ctx(t), rr); err != nil {
			break
		}
	}
	if err == nil {
		_, err = im.Commit(ctx(t))
	}
	im.Abort()
	return err
}
