package fsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/craftdns/craftdns/internal/shardmap"

	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
)

// TestUnroutedWrites: a member of a shard in a map of several shards (key
// mode "name") takes a client's direct write (no epoch) of names placed on
// its shard, and refuses, writing nothing, one of a name placed on another
// shard or held by every shard; a router's write (an epoch) is judged by
// its epoch alone.
func TestUnroutedWrites(t *testing.T) {
	db := openGeneration(t)
	const origin = "example.org."
	var rrs []dns.RR
	for _, s := range []string{
		origin + " 300 IN SOA ns1.example.org. h.example.org. 1 7200 3600 1209600 300",
		origin + " 300 IN NS ns1.example.org.",
		"sub.example.org. 300 IN NS ns.sub.example.org.",
		"ns.sub.example.org. 300 IN A 192.0.2.7",
		"d.example.org. 300 IN DNAME example.net.",
		"d.example.org. 300 IN TXT beside",
	} {
		rrs = append(rrs, mustTestRR(t, s))
	}
	importTestZone(t, db, origin, 1, rrs)
	// direct proposes c as a member does a client's write: checked, then
	// applied with the epoch the check gives.
	direct := func(c *Command) error {
		t.Helper()
		if c.Epoch == 0 {
			if err := db.View(func(tx *bolt.Tx) error {
				var err error
				c.Epoch, err = CheckUnrouted(Generation(tx), c)
				return err
			}); err != nil {
				return err
			}
		}
		_, _, err := applyIn(t, db, c)
		return err
	}
	write := func(c *Command) error {
		t.Helper()
		c.Op, c.Zone = OpChange, origin
		return direct(c)
	}
	a := func(name string) *Command {
		return &Command{Add: []dns.RR{mustTestRR(t, name+" 60 IN A 192.0.2.1")}}
	}
	// No map yet: anything goes.
	if err := write(a("before.example.org.")); err != nil {
		t.Fatal(err)
	}

	m := &shardmap.Map{Epoch: 1, Key: shardmap.KeyName, Partitions: shardmap.MinPartitions, Load: shardmap.DefaultLoad,
		Shards: []shardmap.Shard{{Name: "a", Members: []string{"127.0.0.1:1"}, API: []string{"http://127.0.0.1:1"}}, {Name: "b", Members: []string{"127.0.0.1:2"}, API: []string{"http://127.0.0.1:2"}}}}
	mj, _ := json.Marshal(m)
	part, err := (&Command{Op: OpMapSet, Map: mj, Shard: "a"}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*Command{{Op: OpTxPrepare, Tx: [16]byte{1}, Part: part, Meta: []byte(`{}`)}, {Op: OpTxCommit, Tx: [16]byte{1}}} {
		if _, _, err := applyIn(t, db, c); err != nil {
			t.Fatal(err)
		}
	}
	ring, err := m.Ring()
	if err != nil {
		t.Fatal(err)
	}
	on := func(shard string) string {
		for i := 0; ; i++ {
			if n := fmt.Sprintf("h%d.example.org.", i); ring.Locate(n) == shard {
				return n
			}
		}
	}
	mine, theirs := on("a"), on("b")

	if err := write(a(mine)); err != nil {
		t.Errorf("a direct write of %s, placed here: %v", mine, err)
	}
	for what, c := range map[string]*Command{
		"a name on shard b":               a(theirs),
		"one of two names on shard b":     {Add: []dns.RR{mustTestRR(t, mine+" 60 IN TXT x"), mustTestRR(t, theirs+" 60 IN TXT x")}},
		"a deletion of a name on shard b": {Del: []Deletion{{Name: theirs}}},
		"the apex":                        {Add: []dns.RR{mustTestRR(t, origin+" 60 IN TXT apex")}},
		"a new delegation":                {Add: []dns.RR{mustTestRR(t, mine+" 60 IN NS ns.example.net.")}},
		"a name below a delegation":       {Add: []dns.RR{mustTestRR(t, "x.sub.example.org. 60 IN A 192.0.2.2")}},
		"a DNAME":                         {Del: []Deletion{{Name: "d.example.org.", Type: dns.TypeDNAME}}},
		"every RRset beside a DNAME":      {Del: []Deletion{{Name: "d.example.org."}}},
	} {
		err := write(c)
		if !errors.Is(err, ErrWrongShard) || !errors.Is(err, ErrConflict) {
			t.Errorf("a direct write of %s: want ErrWrongShard, got %v", what, err)
		}
	}
	if rrs := rrsIn(t, db, origin, theirs); len(rrs) != 0 {
		t.Errorf("a refused write wrote %v", rrs)
	}
	// The TXT beside a DNAME is its owner's alone: placed by the ring.
	if ring.Locate("d.example.org.") == "a" {
		if err := write(&Command{Del: []Deletion{{Name: "d.example.org.", Type: dns.TypeTXT}}}); err != nil {
			t.Errorf("the TXT beside a DNAME, on its owner: %v", err)
		}
	}
	// A router's write carries its epoch, and goes where its map says.
	if err := write(&Command{Add: a(theirs).Add, Epoch: 1}); err != nil {
		t.Errorf("a router's write: %v", err)
	}
	// An UPDATE: its prerequisites are read here too.
	u := new(dns.Msg)
	u.SetUpdate(origin)
	u.Answer = []dns.RR{&dns.ANY{Hdr: dns.RR_Header{Name: theirs, Rrtype: dns.TypeANY, Class: dns.ClassANY}}}
	u.Ns = []dns.RR{mustTestRR(t, mine+" 60 IN TXT u")}
	packed, err := u.Pack()
	if err != nil {
		t.Fatal(err)
	}
	if err := direct(&Command{Op: OpUpdate, Zone: origin, Update: packed}); !errors.Is(err, ErrWrongShard) {
		t.Errorf("an UPDATE with a prerequisite on shard b: want ErrWrongShard, got %v", err)
	}
	u.Answer = []dns.RR{&dns.ANY{Hdr: dns.RR_Header{Name: origin, Rrtype: dns.TypeANY, Class: dns.ClassANY}}}
	if packed, err = u.Pack(); err != nil {
		t.Fatal(err)
	}
	if err := direct(&Command{Op: OpUpdate, Zone: origin, Update: packed}); err != nil {
		t.Errorf("an UPDATE of a name here with a prerequisite on the apex: %v", err)
	}
	// A direct write checked at one epoch and applied after its name's
	// partition moved away is refused then, as a router's would be.
	stale := a(mine)
	if err := db.View(func(tx *bolt.Tx) error {
		var err error
		stale.Epoch, err = CheckUnrouted(Generation(tx), &Command{Op: OpChange, Zone: origin, Add: stale.Add})
		return err
	}); err != nil || stale.Epoch != 1 {
		t.Fatalf("checking a direct write: epoch %d, %v", stale.Epoch, err)
	}
	m2 := *m
	m2.Epoch, m2.Owners = 2, make([]string, m.Partitions)
	for p := range m2.Owners {
		m2.Owners[p] = ring.Owner(p)
	}
	m2.Owners[ring.Partition(mine)] = "b"
	mj2, _ := json.Marshal(&m2)
	part2, err := (&Command{Op: OpMapSet, Map: mj2, Shard: "a"}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*Command{{Op: OpTxPrepare, Tx: [16]byte{2}, Part: part2, Meta: []byte(`{}`)}, {Op: OpTxCommit, Tx: [16]byte{2}}} {
		if _, _, err := applyIn(t, db, c); err != nil {
			t.Fatal(err)
		}
	}
	stale.Op, stale.Zone = OpChange, origin
	if _, _, err := applyIn(t, db, stale); !errors.Is(err, ErrStaleMap) {
		t.Errorf("a direct write of a name that moved away after its check: want ErrStaleMap, got %v", err)
	}
}

// rrsIn returns the RRs at name of zone origin in db.
func rrsIn(t *testing.T, db *bolt.DB, origin, name string) []dns.RR {
	t.Helper()
	var rrs []dns.RR
	if err := db.View(func(tx *bolt.Tx) error {
		zb := Generation(tx).Bucket(BucketZones).Bucket([]byte(origin))
		var err error
		rrs, err = RRsAt(zb, name)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return rrs
}

// importTestZone imports zone origin holding rrs into db, as import id.
func importTestZone(t *testing.T, db *bolt.DB, origin string, id uint64, rrs []dns.RR) {
	t.Helper()
	for _, c := range []*Command{
		{Op: OpImportBegin, Zone: origin, Import: id},
		{Op: OpImportChunk, Zone: origin, Import: id, Add: rrs},
		{Op: OpImportCommit, Zone: origin, Import: id},
	} {
		if _, _, err := applyIn(t, db, c); err != nil {
			t.Fatal(err)
		}
	}
}
