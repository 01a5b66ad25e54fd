package replica

import (
	"bytes"
	"testing"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"

	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// TestSnapshotStream streams one member's state into another's staging
// generation and checks it arrives whole.
func TestSnapshotStream(t *testing.T) {
	c := newTestCluster(t, 1, 0)
	src := c.leader()
	if _, err := src.PutZone(ctx(t), "example.org.", parseTestZone(t), false); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := (*snapshotter)(src).WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	dst := newTestCluster(t, 1, 0).leader()
	m := &pb.Message{Snapshot: &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: proto.Uint64(9), Term: proto.Uint64(1)}}}
	if err := (*snapshotter)(dst).ReceiveSnapshot(m, &buf); err != nil {
		t.Fatal(err)
	}
	want, _ := src.Status()
	if dst.staged.applied != want.Applied || dst.staged.applied == 0 {
		t.Errorf("expected staged data applied to %d, got %d", want.Applied, dst.staged.applied)
	}
	dst.db.View(func(tx *bolt.Tx) error {
		z := tx.Bucket(dst.staged.gen).Bucket(fsm.BucketZones).Bucket([]byte("example.org."))
		if z == nil || z.Get(dnsname.CanonicalKey("www.example.org.")) == nil {
			t.Error("expected the zone in the staged generation")
		}
		return nil
	})
}

// TestImportInOneTransaction applies a whole import (begin, chunks, commit)
// in one transaction, as a follower catching up from the log does.
func TestImportInOneTransaction(t *testing.T) {
	c := newTestCluster(t, 1, 0)
	r := c.leader()
	rrs := parseTestZone(t)
	cmds := []*fsm.Command{
		{Op: fsm.OpImportBegin, Zone: "example.org.", Import: 1},
		{Op: fsm.OpImportChunk, Zone: "example.org.", Import: 1, Add: rrs[:2]},
		{Op: fsm.OpImportChunk, Zone: "example.org.", Import: 1, Add: rrs[2:]},
		{Op: fsm.OpImportCommit, Zone: "example.org.", Import: 1},
	}
	var res Result
	err := r.db.Update(func(tx *bolt.Tx) error {
		for _, cmd := range cmds {
			var err error
			if res, _, err = fsm.Apply(fsm.Generation(tx), cmd, 0); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Records != len(rrs) {
		t.Errorf("expected %d records imported, got %d", len(rrs), res.Records)
	}
	r.db.View(func(tx *bolt.Tx) error {
		z := fsm.Generation(tx).Bucket(fsm.BucketZones).Bucket([]byte("example.org."))
		if z == nil || z.Get(dnsname.CanonicalKey("www.example.org.")) == nil || z.Get(dnsname.CanonicalKey("example.org.")) == nil {
			t.Error("expected the imported names stored")
		}
		return nil
	})
}
