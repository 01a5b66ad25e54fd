package fsm

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/craftdns/craftdns/internal/shardmap"

	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
)

// TestZoneMove moves a zone between two shards in key mode "zone", as a
// migration's batch does: the new owner's map part commits the zone it
// staged before, then the change made on the old owner since; the old
// owner's part holds the zone's writes while it is prepared and deletes
// the zone when it commits.
func TestZoneMove(t *testing.T) {
	const origin = "moved.example."
	const parts = shardmap.MinPartitions
	p := shardmap.PartitionOf(origin, parts)
	shards := []shardmap.Shard{{Name: "a", Members: []string{"127.0.0.1:1"}, API: []string{"http://127.0.0.1:1"}}, {Name: "b", Members: []string{"127.0.0.1:2"}, API: []string{"http://127.0.0.1:2"}}}
	owners := make([]string, parts)
	for i := range owners {
		owners[i] = "a"
	}
	m1 := &shardmap.Map{Epoch: 1, Key: shardmap.KeyZone, Partitions: parts, Load: shardmap.DefaultLoad, Shards: shards, Owners: owners}
	m2 := m1.Clone()
	m2.Epoch, m2.Owners[p] = 2, "b"
	src, dst := openGeneration(t), openGeneration(t)
	tx := byte(0)
	mapPart := func(db *bolt.DB, part *Command) (prepare, commit func() error) {
		tx++
		id := [16]byte{tx}
		return func() error {
				pb, err := part.Marshal()
				if err != nil {
					return err
				}
				_, _, err = applyIn(t, db, &Command{Op: OpTxPrepare, Tx: id, Part: pb, Meta: []byte(`{}`)})
				return err
			}, func() error {
				_, _, err := applyIn(t, db, &Command{Op: OpTxCommit, Tx: id})
				return err
			}
	}
	mj := func(m *shardmap.Map) []byte { b, _ := json.Marshal(m); return b }
	for _, x := range []struct {
		db    *bolt.DB
		shard string
	}{{src, "a"}, {dst, "b"}} {
		prep, commit := mapPart(x.db, &Command{Op: OpMapSet, Map: mj(m1), Shard: x.shard})
		if err := prep(); err != nil {
			t.Fatal(err)
		}
		if err := commit(); err != nil {
			t.Fatal(err)
		}
	}
	zone := []dns.RR{
		mustTestRR(t, origin+" 300 IN SOA ns1.moved.example. h.moved.example. 7 7200 3600 1209600 300"),
		mustTestRR(t, origin+" 300 IN NS ns1.moved.example."),
		mustTestRR(t, "ns1.moved.example. 300 IN A 192.0.2.53"),
		mustTestRR(t, "www.moved.example. 300 IN A 192.0.2.10"),
	}
	put := func(db *bolt.DB, id uint64, commit bool) {
		cs := []*Command{{Op: OpImportBegin, Zone: origin, Import: id}, {Op: OpImportChunk, Zone: origin, Import: id, Add: zone}}
		if commit {
			cs = append(cs, &Command{Op: OpImportCommit, Zone: origin, Import: id})
		}
		for _, c := range cs {
			if _, _, err := applyIn(t, db, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(src, 1, true)
	put(dst, 9, false) // the clone, staged

	// The old owner's part: the zone's writes wait while it is prepared.
	srcPrep, srcCommit := mapPart(src, &Command{Op: OpMapSet, Map: mj(m2), Shard: "a", Hold: []uint32{uint32(p)}, Drop: true})
	if err := srcPrep(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := applyIn(t, src, &Command{Op: OpChange, Zone: origin, Add: []dns.RR{mustTestRR(t, "late.moved.example. 60 IN A 192.0.2.99")}, Epoch: 1}); !errors.Is(err, ErrBusy) {
		t.Fatalf("a write of the held zone: want ErrBusy, got %v", err)
	}
	// The new owner's part: the staged clone, then the change since.
	catchUp := &Command{Op: OpChange, Zone: origin,
		Add: []dns.RR{mustTestRR(t, "new.moved.example. 300 IN A 192.0.2.11"), mustTestRR(t, origin+" 300 IN SOA ns1.moved.example. h.moved.example. 8 7200 3600 1209600 300")},
		Del: []Deletion{{RR: mustTestRR(t, "www.moved.example. 300 IN A 192.0.2.10")}}}
	dstPrep, dstCommit := mapPart(dst, &Command{Op: OpMapSet, Map: mj(m2), Shard: "b", Moves: []*Command{catchUp}, Imports: []Staged{{Zone: origin, Import: 9}}})
	if err := dstPrep(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := applyIn(t, dst, &Command{Op: OpImportBegin, Zone: origin, Import: 10}); !errors.Is(err, ErrBusy) {
		t.Errorf("another import of the staged zone while the part is prepared: want ErrBusy, got %v", err)
	}
	if err := dstCommit(); err != nil {
		t.Fatal(err)
	}
	if err := srcCommit(); err != nil {
		t.Fatal(err)
	}
	if rrs := rrsIn(t, dst, origin, "new.moved.example."); len(rrs) != 1 {
		t.Errorf("the change since the clone did not land: %v", rrs)
	}
	if rrs := rrsIn(t, dst, origin, "www.moved.example."); len(rrs) != 0 {
		t.Errorf("a record deleted since the clone is still there: %v", rrs)
	}
	if rrs := rrsIn(t, dst, origin, origin); len(rrs) == 0 {
		t.Error("no apex on the new owner")
	} else {
		for _, rr := range rrs {
			if soa, ok := rr.(*dns.SOA); ok && soa.Serial < 8 {
				t.Errorf("the moved zone's serial went back: %d", soa.Serial)
			}
		}
	}
	src.View(func(tx *bolt.Tx) error {
		if Generation(tx).Bucket(BucketZones).Bucket([]byte(origin)) != nil {
			t.Error("the old owner still holds the zone it handed over")
		}
		return nil
	})
	// Imports need key mode "zone", and a current staged import.
	prep, _ := mapPart(dst, &Command{Op: OpMapSet, Map: mj(func() *shardmap.Map { m := m2.Clone(); m.Epoch = 3; return m }()), Shard: "b", Imports: []Staged{{Zone: origin, Import: 9}}})
	if err := prep(); err == nil {
		t.Error("a part committing an import that is no longer staged was prepared")
	}
}
