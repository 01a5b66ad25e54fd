package fsm

import (
	"encoding/binary"
	"errors"

	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
)

// The IXFR journal (RFC 1995) of a zone lives in the generation bucket, so
// Raft applies it on every member, snapshots carry it, and any member
// answers IXFR:
//
//	data.<n>/journal/<origin>/<sequence> -> one change
//
// The sequence is 8 bytes big-endian, one more than the last key (not the
// bucket's NextSequence: snapshots carry keys, not bucket sequences). A
// change is encoded as
//
//	version (1) | from serial (4) | to serial (4) | total (8) |
//	length of the removed RRs (uvarint) | removed RRs | added RRs
//
// with the RRs as encodeRRs writes them, the old SOA first among the removed
// and the new SOA first among the added. total counts the bytes of all
// changes appended since the journal was last reset, this one included, so
// the size of a journal is total(last) - total(first) + len(first) without
// reading the values in between.
var BucketJournal = []byte("journal")

const (
	// DefaultJournal is how many changes per zone the journal keeps unless
	// Config.Journal says otherwise.
	DefaultJournal = 1000
	// JournalBytes bounds the journal of one zone: older changes are dropped
	// while the changes kept take more (in encoded records).
	JournalBytes = 16 << 20

	journalVersion = 1
	journalHeader  = 1 + 4 + 4 + 8
)

// journalBytes is JournalBytes; tests lower it.
var journalBytes uint64 = JournalBytes

// journalEntry is the header of one change.
type journalEntry struct {
	from, to uint32
	total    uint64
}

func parseJournalEntry(v []byte) (journalEntry, bool) {
	if len(v) < journalHeader || v[0] != journalVersion {
		return journalEntry{}, false
	}
	return journalEntry{
		from:  binary.BigEndian.Uint32(v[1:]),
		to:    binary.BigEndian.Uint32(v[5:]),
		total: binary.BigEndian.Uint64(v[9:]),
	}, true
}

// journalAppend records one committed change of zone for IXFR (RFC 1995):
// removed holds the old SOA and the RRs deleted, added the new SOA and the
// RRs added. It runs inside the applying transaction, so the journal is
// replicated and every member can answer IXFR. A change that does not
// start where the journal ends (or has no SOA on either side) resets the
// journal instead: IXFR must never skip a change. journalTrim bounds it.
func journalAppend(g *bolt.Bucket, zone string, removed, added []dns.RR) error {
	oldSOA, removed := splitSOA(removed)
	newSOA, added := splitSOA(added)
	if oldSOA == nil || newSOA == nil {
		return journalReset(g, zone)
	}
	jb, err := g.CreateBucketIfNotExists(BucketJournal)
	if err != nil {
		return err
	}
	zb, err := jb.CreateBucketIfNotExists([]byte(zone))
	if err != nil {
		return err
	}
	var seq, total uint64
	if k, v := zb.Cursor().Last(); k != nil {
		last, ok := parseJournalEntry(v)
		if !ok || len(k) != 8 || last.to != oldSOA.Serial {
			if err := jb.DeleteBucket([]byte(zone)); err != nil {
				return err
			}
			if zb, err = jb.CreateBucket([]byte(zone)); err != nil {
				return err
			}
		} else {
			seq, total = binary.BigEndian.Uint64(k), last.total
		}
	}
	rem, err := EncodeRRs(append([]dns.RR{oldSOA}, removed...))
	if err != nil {
		return err
	}
	add, err := EncodeRRs(append([]dns.RR{newSOA}, added...))
	if err != nil {
		return err
	}
	v := make([]byte, journalHeader, journalHeader+binary.MaxVarintLen64+len(rem)+len(add))
	v = binary.AppendUvarint(v, uint64(len(rem)))
	v = append(append(v, rem...), add...)
	v[0] = journalVersion
	binary.BigEndian.PutUint32(v[1:], oldSOA.Serial)
	binary.BigEndian.PutUint32(v[5:], newSOA.Serial)
	binary.BigEndian.PutUint64(v[9:], total+uint64(len(v)))
	return zb.Put(IDKey(seq+1), v)
}

// splitSOA returns the first SOA of rrs and the other RRs.
func splitSOA(rrs []dns.RR) (*dns.SOA, []dns.RR) {
	for i, rr := range rrs {
		if soa, ok := rr.(*dns.SOA); ok {
			rest := make([]dns.RR, 0, len(rrs)-1)
			rest = append(append(rest, rrs[:i]...), rrs[i+1:]...)
			return soa, rest
		}
	}
	return nil, rrs
}

// journalTrim drops the oldest changes of zone's journal until it holds at
// most limit changes and JournalBytes bytes. limit 0 means DefaultJournal; a
// negative limit drops the whole journal (IXFR off). It runs in apply, so
// members with the same limit hold the same journal.
func journalTrim(g *bolt.Bucket, zone string, limit int) error {
	jb := g.Bucket(BucketJournal)
	if jb == nil || jb.Bucket([]byte(zone)) == nil {
		return nil
	}
	if limit < 0 {
		return jb.DeleteBucket([]byte(zone))
	}
	if limit == 0 {
		limit = DefaultJournal
	}
	zb := jb.Bucket([]byte(zone))
	c := zb.Cursor()
	lk, lv := c.Last()
	last, ok := parseJournalEntry(lv)
	if lk == nil || !ok || len(lk) != 8 {
		return nil
	}
	lastSeq := binary.BigEndian.Uint64(lk)
	for {
		fk, fv := c.First()
		first, ok := parseJournalEntry(fv)
		if fk == nil || !ok || len(fk) != 8 {
			return nil
		}
		count := lastSeq - binary.BigEndian.Uint64(fk) + 1
		size := last.total - first.total + uint64(len(fv))
		if count <= uint64(limit) && size <= journalBytes {
			return nil
		}
		if err := zb.Delete(append([]byte(nil), fk...)); err != nil {
			return err
		}
	}
}

// journalReset drops the journal of zone: after a whole-zone import or a
// deletion, no secondary's copy can be brought up to date incrementally.
func journalReset(g *bolt.Bucket, zone string) error {
	if err := dropCuts(g, zone); err != nil {
		return err
	}
	jb := g.Bucket(BucketJournal)
	if jb == nil || jb.Bucket([]byte(zone)) == nil {
		return nil
	}
	return jb.DeleteBucket([]byte(zone))
}

// journalChanges calls fn with the removed and added RRs (each led by its
// SOA) of the changes that bring a copy of zone at serial to current, in
// order. It reports false, without calling fn, when the journal does not
// cover serial..current: it was trimmed past serial, reset since, or serial
// was never the zone's.
func journalChanges(g *bolt.Bucket, zone string, serial, current uint32, fn func(removed, added []dns.RR) error) (bool, error) {
	jb := g.Bucket(BucketJournal)
	if jb == nil {
		return false, nil
	}
	zb := jb.Bucket([]byte(zone))
	if zb == nil {
		return false, nil
	}
	// Find the change from serial, then check the chain reaches current
	// before handing anything over.
	c := zb.Cursor()
	var start []byte
	var prev journalEntry
	for k, v := c.First(); k != nil; k, v = c.Next() {
		e, ok := parseJournalEntry(v)
		if !ok {
			return false, nil
		}
		switch {
		case start == nil && e.from == serial:
			start = append([]byte(nil), k...)
		case start != nil && e.from != prev.to:
			return false, nil
		}
		prev = e
	}
	if start == nil || prev.to != current {
		return false, nil
	}
	for k, v := c.Seek(start); k != nil; k, v = c.Next() {
		removed, added, err := decodeJournalEntry(v)
		if err != nil {
			return true, err
		}
		if err := fn(removed, added); err != nil {
			return true, err
		}
	}
	return true, nil
}

var errJournal = errors.New("malformed journal entry")

func decodeJournalEntry(v []byte) (removed, added []dns.RR, err error) {
	if _, ok := parseJournalEntry(v); !ok {
		return nil, nil, errJournal
	}
	v = v[journalHeader:]
	n, w := binary.Uvarint(v)
	if w <= 0 || n > uint64(len(v)-w) {
		return nil, nil, errJournal
	}
	if removed, err = DecodeRRs(v[w : w+int(n)]); err != nil {
		return nil, nil, err
	}
	if added, err = DecodeRRs(v[w+int(n):]); err != nil {
		return nil, nil, err
	}
	return removed, added, nil
}
