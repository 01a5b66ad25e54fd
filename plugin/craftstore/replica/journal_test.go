package replica

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"

	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// newJournalReplica runs a single member with the given journal limit.
func newJournalReplica(t *testing.T, journal int, onChange func(string)) *Replica {
	t.Helper()
	r, err := Open(Config{ID: 1, Dir: t.TempDir(), RaftAddr: "127.0.0.1:0",
		Peers: []Member{{ID: 1, Raft: "127.0.0.1:0"}}, Tick: 10 * time.Millisecond,
		Journal: journal, OnChange: onChange, Logger: testLogger{t, 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	eventually(t, "ready", r.Ready)
	if _, err := r.PutZone(ctx(t), "example.org.", parseTestZone(t), false); err != nil {
		t.Fatal(err)
	}
	return r
}

// addHost adds hN/A in one change and returns the new serial.
func addHost(t *testing.T, r *Replica, n int) uint32 {
	t.Helper()
	serial, err := r.Change(ctx(t), "example.org.", []dns.RR{mustRR(t, fmt.Sprintf("h%d.example.org. 300 IN A 192.0.2.%d", n, n))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return serial
}

func journalLen(t *testing.T, r *Replica) int {
	n := 0
	r.db.View(func(tx *bolt.Tx) error {
		if jb := fsm.Generation(tx).Bucket(fsm.BucketJournal); jb != nil && jb.Bucket([]byte("example.org.")) != nil {
			n = jb.Bucket([]byte("example.org.")).Stats().KeyN
		}
		return nil
	})
	return n
}

func TestJournalResetOnImportAndDelete(t *testing.T) {
	r := newJournalReplica(t, 0, nil)
	addHost(t, r, 1)
	addHost(t, r, 2)
	if n := journalLen(t, r); n != 2 {
		t.Fatalf("expected 2 journaled changes, got %d", n)
	}
	if _, err := r.PutZone(ctx(t), "example.org.", parseTestZone(t), false); err != nil {
		t.Fatal(err)
	}
	if n := journalLen(t, r); n != 0 {
		t.Errorf("expected an import to reset the journal, got %d changes", n)
	}
	addHost(t, r, 3)
	if n := journalLen(t, r); n != 1 {
		t.Errorf("expected 1 change after the import, got %d", n)
	}
	if err := r.DeleteZone(ctx(t), "example.org."); err != nil {
		t.Fatal(err)
	}
	if n := journalLen(t, r); n != 0 {
		t.Errorf("expected a deletion to drop the journal, got %d changes", n)
	}
}

func TestJournalInSnapshot(t *testing.T) {
	src := newJournalReplica(t, 0, nil)
	for i := 1; i <= 3; i++ {
		addHost(t, src, i)
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
	var want, got [][]byte
	collect := func(db *bolt.DB, gen func(tx *bolt.Tx) *bolt.Bucket, out *[][]byte) {
		db.View(func(tx *bolt.Tx) error {
			jb := gen(tx).Bucket(fsm.BucketJournal)
			if jb == nil || jb.Bucket([]byte("example.org.")) == nil {
				return nil
			}
			return jb.Bucket([]byte("example.org.")).ForEach(func(k, v []byte) error {
				*out = append(*out, append(append([]byte(nil), k...), v...))
				return nil
			})
		})
	}
	collect(src.db, fsm.Generation, &want)
	collect(dst.db, func(tx *bolt.Tx) *bolt.Bucket { return tx.Bucket(dst.staged.gen) }, &got)
	if len(want) != 3 || len(got) != len(want) {
		t.Fatalf("expected the 3 journaled changes in the snapshot, got %d of %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(want[i], got[i]) {
			t.Errorf("journal entry %d differs after the snapshot", i)
		}
	}
}

// transferText runs Transfer and returns each record as "TYPE name serial-or-data".
func transferText(t *testing.T, r *Replica, serial uint32) []string {
	t.Helper()
	var out []string
	err := r.Transfer("example.org.", serial, func(rrs []dns.RR) error {
		if len(rrs) == 0 {
			t.Error("expected no empty batch")
		}
		for _, rr := range rrs {
			out = append(out, short(rr))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func short(rr dns.RR) string {
	switch rr := rr.(type) {
	case *dns.SOA:
		return fmt.Sprintf("SOA %d", rr.Serial)
	case *dns.A:
		return fmt.Sprintf("A %s %s", rr.Hdr.Name, rr.A)
	case *dns.NS:
		return "NS " + rr.Ns
	}
	return rr.String()
}

func TestTransfer(t *testing.T) {
	r := newJournalReplica(t, 3, nil)
	if _, err := r.Change(ctx(t), "example.org.", []dns.RR{mustRR(t, "www.example.org. 300 IN A 192.0.2.11")},
		[]Deletion{{RR: mustRR(t, "www.example.org. 300 IN A 192.0.2.10")}}); err != nil {
		t.Fatal(err)
	}
	addHost(t, r, 1)
	cur := addHost(t, r, 2) // serial 4 after the import at 1

	tests := []struct {
		serial uint32
		want   string
	}{
		// AXFR: the SOA first and last.
		{0, "SOA 4, NS ns1.example.org., A h1.example.org. 192.0.2.1, A h2.example.org. 192.0.2.2, A ns1.example.org. 192.0.2.53, A www.example.org. 192.0.2.11, SOA 4"},
		// IXFR (RFC 1995 section 4): current SOA, per change old SOA,
		// removed, new SOA, added, current SOA.
		{1, "SOA 4, SOA 1, A www.example.org. 192.0.2.10, SOA 2, A www.example.org. 192.0.2.11, SOA 2, SOA 3, A h1.example.org. 192.0.2.1, SOA 3, SOA 4, A h2.example.org. 192.0.2.2, SOA 4"},
		{3, "SOA 4, SOA 3, SOA 4, A h2.example.org. 192.0.2.2, SOA 4"},
		// Up to date or newer: the SOA alone.
		{4, "SOA 4"},
		{5, "SOA 4"},
		// An older serial the zone never had (RFC 1982): AXFR.
		{4294967040, "SOA 4, NS ns1.example.org., A h1.example.org. 192.0.2.1, A h2.example.org. 192.0.2.2, A ns1.example.org. 192.0.2.53, A www.example.org. 192.0.2.11, SOA 4"},
	}
	for _, tc := range tests {
		if got := strings.Join(transferText(t, r, tc.serial), ", "); got != tc.want {
			t.Errorf("serial %d: expected\n%s\ngot\n%s", tc.serial, tc.want, got)
		}
	}
	if cur != 4 {
		t.Fatalf("expected serial 4, got %d", cur)
	}

	// The journal keeps 3 changes: from 1 it no longer reaches back.
	addHost(t, r, 3)
	if got := transferText(t, r, 1); len(got) != 8 || got[0] != "SOA 5" || got[1] != "NS ns1.example.org." || got[7] != "SOA 5" {
		t.Errorf("expected AXFR once the journal is too short, got %v", got)
	}
	if got := transferText(t, r, 2); len(got) != 11 || got[1] != "SOA 2" {
		t.Errorf("expected IXFR from 2, got %v", got)
	}
	if err := r.Transfer("nope.org.", 0, func([]dns.RR) error { return nil }); err == nil {
		t.Error("expected an error for an unknown zone")
	}
}

func TestTransferStreamsInBatches(t *testing.T) {
	r := newJournalReplica(t, 0, nil)
	var add []dns.RR
	for i := 0; i < 3*fsm.XfrBatch; i++ {
		add = append(add, mustRR(t, fmt.Sprintf("n%d.example.org. 300 IN A 192.0.2.1", i)))
	}
	if _, err := r.Change(ctx(t), "example.org.", add, nil); err != nil {
		t.Fatal(err)
	}
	batches, total := 0, 0
	r.Transfer("example.org.", 0, func(rrs []dns.RR) error {
		batches++
		total += len(rrs)
		if len(rrs) > fsm.XfrBatch+1 {
			t.Errorf("expected batches of about %d records, got %d", fsm.XfrBatch, len(rrs))
		}
		return nil
	})
	if want := 3*fsm.XfrBatch + 5; total != want || batches < 3 {
		t.Errorf("expected %d records in several batches, got %d in %d", want, total, batches)
	}
}

func TestOnChange(t *testing.T) {
	var mu sync.Mutex
	var got []string
	r := newJournalReplica(t, 0, func(z string) {
		mu.Lock()
		got = append(got, z)
		mu.Unlock()
	})
	addHost(t, r, 1)
	if err := r.DeleteZone(ctx(t), "example.org."); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	// The import, then the change; nothing for the deletion.
	if strings.Join(got, " ") != "example.org. example.org." {
		t.Errorf("expected two changes of example.org., got %v", got)
	}
}

// TestReimportBumpsSerial: a replaced zone's serial increases, so that
// secondaries see the change (the bump is written after bbolt's MoveBucket,
// which drops earlier writes of the same transaction to the moved bucket).
func TestReimportBumpsSerial(t *testing.T) {
	r := newJournalReplica(t, 0, nil)
	for want := uint32(2); want <= 3; want++ {
		res, err := r.PutZone(ctx(t), "example.org.", parseTestZone(t), false)
		if err != nil {
			t.Fatal(err)
		}
		if res.Serial != want || r.Zone("example.org.").SOA().Serial != want {
			t.Errorf("expected serial %d stored and served, got %d and %d", want, res.Serial, r.Zone("example.org.").SOA().Serial)
		}
		if got := transferText(t, r, 0); got[0] != fmt.Sprintf("SOA %d", want) {
			t.Errorf("expected the fsm.Transfer to start with SOA %d, got %s", want, got[0])
		}
	}
}

// TestTransferStreams checks that a full transfer holds no more than a few
// batches in memory: the heap in the middle of a transfer of 100k records
// is about what it was before.
func TestTransferStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("imports 100k records")
	}
	r := newJournalReplica(t, 0, nil)
	rrs := parseTestZone(t)
	for i := 0; i < 100000; i++ {
		rrs = append(rrs, &dns.A{Hdr: dns.RR_Header{Name: fmt.Sprintf("h%d.example.org.", i), Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300},
			A: []byte{10, byte(i >> 16), byte(i >> 8), byte(i)}})
	}
	if _, err := r.PutZone(ctx(t), "example.org.", rrs, false); err != nil {
		t.Fatal(err)
	}
	rrs = nil
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	var during uint64
	n := 0
	err := r.Transfer("example.org.", 0, func(b []dns.RR) error {
		n += len(b)
		if during == 0 && n > 50000 {
			during = heap()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != 100005 {
		t.Fatalf("expected 100005 records, got %d", n)
	}
	t.Logf("heap before %d, in the middle of the fsm.Transfer %d", before, during)
	// 100k decoded A records take well over 10 MB.
	if during > before+4<<20 {
		t.Errorf("expected the fsm.Transfer to stream, the heap grew from %d to %d bytes", before, during)
	}
}

func TestJournalOff(t *testing.T) {
	r := newJournalReplica(t, -1, nil)
	addHost(t, r, 1)
	if n := journalLen(t, r); n != 0 {
		t.Errorf("expected no journal, got %d changes", n)
	}
	if got := transferText(t, r, 1); len(got) != 6 || got[1] != "NS ns1.example.org." {
		t.Errorf("expected AXFR without a journal, got %v", got)
	}
}
