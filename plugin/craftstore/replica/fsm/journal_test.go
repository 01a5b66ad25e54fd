package fsm

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
)

// openGeneration opens a bare bbolt file with one generation bucket.
func openGeneration(t testing.TB) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "j.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	err = db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucket(BucketMeta)
		if err != nil {
			return err
		}
		name, _, err := CreateGeneration(tx)
		if err != nil {
			return err
		}
		return meta.Put(KeyCurrent, name)
	})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func soaRR(t testing.TB, serial uint32) dns.RR {
	return mustRR(t, fmt.Sprintf("example.org. 300 IN SOA ns1.example.org. hostmaster.example.org. %d 7200 3600 1209600 300", serial))
}

// appendChange journals the change from serial to serial+1 that adds
// name/A 192.0.2.<serial>.
func appendChange(t *testing.T, db *bolt.DB, serial uint32, limit int) {
	t.Helper()
	add := mustRR(t, fmt.Sprintf("h%d.example.org. 300 IN A 192.0.2.%d", serial, serial%250))
	err := db.Update(func(tx *bolt.Tx) error {
		g := Generation(tx)
		// The SOA is not first among the removed: the journal puts it first.
		if err := journalAppend(g, "example.org.", []dns.RR{soaRR(t, serial)}, []dns.RR{add, soaRR(t, serial+1)}); err != nil {
			return err
		}
		return journalTrim(g, "example.org.", limit)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// journalSerials lists the from-serials of the journal of example.org.
func journalSerials(t *testing.T, db *bolt.DB) []uint32 {
	t.Helper()
	var out []uint32
	db.View(func(tx *bolt.Tx) error {
		jb := Generation(tx).Bucket(BucketJournal)
		if jb == nil || jb.Bucket([]byte("example.org.")) == nil {
			return nil
		}
		return jb.Bucket([]byte("example.org.")).ForEach(func(_, v []byte) error {
			e, ok := parseJournalEntry(v)
			if !ok {
				t.Errorf("malformed journal entry %x", v)
			}
			out = append(out, e.from)
			return nil
		})
	})
	return out
}

func TestJournalAppendTrim(t *testing.T) {
	db := openGeneration(t)
	for s := uint32(1); s <= 10; s++ {
		appendChange(t, db, s, 4)
	}
	if got := fmt.Sprint(journalSerials(t, db)); got != "[7 8 9 10]" {
		t.Errorf("expected the last 4 changes kept, got %s", got)
	}
	// The changes from 8 to 11, each led by its SOA.
	var seq []string
	db.View(func(tx *bolt.Tx) error {
		ok, err := journalChanges(Generation(tx), "example.org.", 8, 11, func(removed, added []dns.RR) error {
			seq = append(seq, fmt.Sprintf("-%d+%d:%s", removed[0].(*dns.SOA).Serial, added[0].(*dns.SOA).Serial, added[1].Header().Name))
			return nil
		})
		if !ok || err != nil {
			t.Errorf("expected the journal to cover 8..11, got %v %v", ok, err)
		}
		for _, from := range []uint32{5, 6, 12} {
			if ok, _ := journalChanges(Generation(tx), "example.org.", from, 11, nil); ok {
				t.Errorf("expected serial %d not covered", from)
			}
		}
		if ok, _ := journalChanges(Generation(tx), "example.org.", 8, 12, nil); ok {
			t.Error("expected a journal not ending at the current serial to cover nothing")
		}
		return nil
	})
	if got := strings.Join(seq, " "); got != "-8+9:h8.example.org. -9+10:h9.example.org. -10+11:h10.example.org." {
		t.Errorf("unexpected changes %s", got)
	}

	// A change that does not continue the journal starts it again.
	appendChange(t, db, 40, 4)
	if got := fmt.Sprint(journalSerials(t, db)); got != "[40]" {
		t.Errorf("expected a discontinuous change to reset the journal, got %s", got)
	}
	// A negative limit turns the journal off.
	appendChange(t, db, 41, -1)
	if got := journalSerials(t, db); len(got) != 0 {
		t.Errorf("expected no journal with a negative limit, got %v", got)
	}
}

func TestJournalTrimBytes(t *testing.T) {
	defer func(b uint64) { journalBytes = b }(journalBytes)
	db := openGeneration(t)
	appendChange(t, db, 1, 0)
	var one uint64
	db.View(func(tx *bolt.Tx) error {
		_, v := Generation(tx).Bucket(BucketJournal).Bucket([]byte("example.org.")).Cursor().First()
		one = uint64(len(v))
		return nil
	})
	journalBytes = 3*one + one/2 // room for three changes of this size
	for s := uint32(2); s <= 6; s++ {
		appendChange(t, db, s, 0)
	}
	if got := fmt.Sprint(journalSerials(t, db)); got != "[4 5 6]" {
		t.Errorf("expected three changes within the byte budget, got %s", got)
	}
	journalBytes = one / 2 // not even one change fits
	appendChange(t, db, 7, 0)
	if got := journalSerials(t, db); len(got) != 0 {
		t.Errorf("expected an empty journal, got %v", got)
	}
	appendChange(t, db, 8, 0) // still works after emptying
}

func mustRR(t testing.TB, s string) dns.RR {
	rr, err := dns.NewRR(s)
	if err != nil {
		t.Fatal(err)
	}
	return rr
}
