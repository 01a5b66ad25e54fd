package fsm

import (
	"bytes"
	"encoding/binary"
	"strings"
	"sync"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/zonerules"

	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
)

// A whole-zone import is staged over several entries (a zone of a million
// records does not fit one Raft message): OpImportBegin opens a staging
// bucket, OpImportChunk entries fill it, OpImportCommit swaps it in for the
// zone in one transaction. Queries see the old zone until the commit. The proposer
// validated the zone text before proposing; the chunks check what a single
// name needs, the commit checks the apex.

func applyImportBegin(g *bolt.Bucket, c *Command) (Result, *Effect, error) {
	if by, ok := lockedBy(g, c.Zone, c.Zone); ok && committingImport(g, by, c.Zone) {
		// A shard map part commits the staged import of the zone (a
		// migration moves it here): no other import supersedes it.
		return Result{}, nil, Errorf(ErrBusy, "zone %q is being moved to this shard (transaction %x): import it once that finished", c.Zone, by)
	}
	ib := g.Bucket(bucketImports)
	if ib.Bucket([]byte(c.Zone)) != nil {
		// A newer import supersedes an unfinished one.
		if err := ib.DeleteBucket([]byte(c.Zone)); err != nil {
			return Result{}, nil, err
		}
	}
	if _, err := ib.CreateBucket([]byte(c.Zone)); err != nil {
		return Result{}, nil, err
	}
	noteStaged(g, c.Zone)
	meta := binary.BigEndian.AppendUint64(nil, c.Import)
	if c.Absent {
		meta = append(meta, 1)
	} else {
		meta = append(meta, 0)
	}
	return Result{}, nil, g.Bucket(bucketImportMeta).Put([]byte(c.Zone), meta)
}

// importOf returns the staging bucket of the import c names, or a refusal when
// that import is no longer the current one.
func importOf(g *bolt.Bucket, c *Command) (*bolt.Bucket, bool, error) {
	meta := g.Bucket(bucketImportMeta).Get([]byte(c.Zone))
	b := g.Bucket(bucketImports).Bucket([]byte(c.Zone))
	if len(meta) != 9 || b == nil || binary.BigEndian.Uint64(meta) != c.Import {
		return nil, false, Errorf(ErrConflict, "import of zone %q was superseded by another import", c.Zone)
	}
	return b, meta[8] == 1, nil
}

func applyImportChunk(g *bolt.Bucket, c *Command) (Result, *Effect, error) {
	b, _, err := importOf(g, c)
	if err != nil {
		return Result{}, nil, err
	}
	byName := map[string][]dns.RR{}
	var order []string
	for _, rr := range c.Add {
		name := strings.ToLower(rr.Header().Name)
		if _, ok := byName[name]; !ok {
			rrs, err := RRsAt(b, name)
			if err != nil {
				return Result{}, nil, err
			}
			byName[name] = rrs
			order = append(order, name)
		}
		byName[name] = loadRR(byName[name], rr)
	}
	for _, name := range order {
		if err := checkName(name, byName[name]); err != nil {
			return Result{}, nil, err
		}
	}
	noteStaged(g, c.Zone)
	for _, name := range order {
		if err := putRRs(b, name, byName[name]); err != nil {
			return Result{}, nil, err
		}
	}
	return Result{}, nil, nil
}

func applyImportCommit(g *bolt.Bucket, c *Command) (Result, *Effect, error) {
	b, absent, err := importOf(g, c)
	if err != nil {
		return Result{}, nil, err
	}
	zones := g.Bucket(BucketZones)
	old := zones.Bucket([]byte(c.Zone))
	drop := func() error {
		if err := g.Bucket(bucketImportMeta).Delete([]byte(c.Zone)); err != nil {
			return err
		}
		return g.Bucket(bucketImports).DeleteBucket([]byte(c.Zone))
	}
	if absent && old != nil {
		if err := markSeeded(g, c.Zone); err != nil {
			return Result{}, nil, err
		}
		return Result{Skipped: true}, &Effect{Zone: c.Zone, Seeded: true}, drop()
	}

	apex, err := RRsAt(b, c.Zone)
	if err != nil {
		return Result{}, nil, err
	}
	if err := checkApex(c.Zone, apex); err != nil {
		if derr := drop(); derr != nil {
			return Result{}, nil, derr
		}
		return Result{}, nil, err
	}
	serial, _ := soaSerial(apex)
	bumped := false
	if old != nil {
		// A replaced zone must look changed to secondaries (RFC 1982).
		oldApex, err := RRsAt(old, c.Zone)
		if err != nil {
			return Result{}, nil, err
		}
		if prev, ok := soaSerial(oldApex); ok && !zonerules.SerialAfter(serial, prev) {
			apex, serial = bumpSerial(apex, prev, nil)
			bumped = true
		}
		if err := indexZone(g, IndexedParts(g), c.Zone, old, false); err != nil {
			return Result{}, nil, err
		}
		if err := zones.DeleteBucket([]byte(c.Zone)); err != nil {
			return Result{}, nil, err
		}
	}
	records := 0
	if err := b.ForEach(func(_, v []byte) error { records += countRRs(v); return nil }); err != nil {
		return Result{}, nil, err
	}
	var zb *bolt.Bucket
	if stagedHere(g, c.Zone) {
		// Staged in this transaction (a follower catching up applies
		// begin, chunks and commit of one import in one): copied, since
		// bbolt's MoveBucket loses what the same transaction wrote into
		// the moved bucket (etcd-io/bbolt PR 1239). The staged records
		// are in memory as this transaction's pages already.
		if zb, err = zones.CreateBucket([]byte(c.Zone)); err != nil {
			return Result{}, nil, err
		}
		if err := b.ForEach(func(k, v []byte) error { return zb.Put(k, v) }); err != nil {
			return Result{}, nil, err
		}
	} else {
		// Staged in earlier transactions (the proposer's member and,
		// mostly, the others): moved, which writes the staged bucket's
		// header in its new place and none of its pages, where a copy
		// would hold every page of the zone in memory until the
		// transaction commits. The bucket left in the imports is
		// dropped with it.
		if err := g.Bucket(bucketImports).MoveBucket([]byte(c.Zone), zones); err != nil {
			return Result{}, nil, err
		}
		zb = zones.Bucket([]byte(c.Zone))
	}
	if bumped {
		if err := putRRs(zb, c.Zone, apex); err != nil {
			return Result{}, nil, err
		}
	}
	if err := indexZone(g, IndexedParts(g), c.Zone, zb, true); err != nil {
		return Result{}, nil, err
	}
	if g.Bucket(bucketImports).Bucket([]byte(c.Zone)) != nil {
		if err := g.Bucket(bucketImports).DeleteBucket([]byte(c.Zone)); err != nil {
			return Result{}, nil, err
		}
	}
	if err := g.Bucket(bucketImportMeta).Delete([]byte(c.Zone)); err != nil {
		return Result{}, nil, err
	}
	if err := journalReset(g, c.Zone); err != nil {
		return Result{}, nil, err
	}
	if err := putBase(g, c.Zone, serial); err != nil {
		return Result{}, nil, err
	}
	if absent {
		if err := markSeeded(g, c.Zone); err != nil {
			return Result{}, nil, err
		}
	}
	return Result{Serial: serial, Records: records}, &Effect{Zone: c.Zone, Reload: true, Seeded: absent}, nil
}

// markSeeded records that a seed import of zone committed (Absent set: an
// import that only ever creates the zone), in the transaction of the
// commit: a member that dies before the commit seeds again when it comes
// back, and one that seeded never seeds again, even after the zone was
// deleted.
func markSeeded(g *bolt.Bucket, zone string) error {
	b, err := g.CreateBucketIfNotExists(bucketSeeded)
	if err != nil {
		return err
	}
	return b.Put([]byte(zone), nil)
}

// SeededZones returns the zones recorded as seeded in generation g.
func SeededZones(g *bolt.Bucket) (map[string]bool, error) {
	seeded := map[string]bool{}
	b := g.Bucket(bucketSeeded)
	if b == nil {
		return seeded, nil
	}
	return seeded, b.ForEach(func(k, _ []byte) error {
		seeded[string(k)] = true
		return nil
	})
}

// countRRs counts the records in an encoded value without decoding them.
func countRRs(v []byte) int {
	n := 0
	for len(v) >= 4 {
		l := binary.BigEndian.Uint32(v)
		if uint64(l) > uint64(len(v)-4) {
			break
		}
		v = v[4+l:]
		n++
	}
	return n
}

// committingImport reports whether the part prepared by transaction id is
// a shard map part that commits a staged import of zone.
func committingImport(g *bolt.Bucket, id []byte, zone string) bool {
	prep, err := PreparedPart(g, id)
	if err != nil || prep == nil {
		return false
	}
	part, err := Unmarshal(prep.Part)
	return err == nil && part.Op == OpMapSet && part.imports(zone)
}

// An import fed record by record (replica.Import: PUT, AXFR in, seed) is
// checked by its proposer as CheckZone checks a whole zone, without
// holding the zone: each chunk against what the import staged before it
// (CheckImportChunk), and before the commit what only the whole zone
// shows (CheckStagedApex, CheckStagedDNAMEs). The proposer reads its own
// member's state, which applied every chunk it proposed. These are a
// proposer's checks of a client's zone (doc.go, "Adding a command", 7):
// Apply's rules stay those above.

// StagedImport returns the staging bucket of import id of zone in g, nil
// when that import is not the zone's current one.
func StagedImport(g *bolt.Bucket, zone string, id uint64) *bolt.Bucket {
	meta := g.Bucket(bucketImportMeta).Get([]byte(zone))
	if len(meta) != 9 || binary.BigEndian.Uint64(meta) != id {
		return nil
	}
	return g.Bucket(bucketImports).Bucket([]byte(zone))
}

// Importing reports whether generation g holds an unfinished import of
// zone.
func Importing(g *bolt.Bucket, zone string) bool {
	return g.Bucket(bucketImportMeta).Get([]byte(zone)) != nil
}

// CheckImportChunk checks chunk, the next records of an import of zone
// origin whose staged records are in b (nil: none yet), as CheckZone
// checks a whole zone, for the names the chunk touches: every record
// (zonerules.CheckRecord, an SOA only at the apex), one SOA, CNAME and
// DNAME a name at most (duplicates aside), and every such name's records,
// staged and new, as CheckName and, with a DNAME, CheckDNAME say. The
// errors are zonerules' plain errors.
func CheckImportChunk(b *bolt.Bucket, origin string, chunk []dns.RR) error {
	byName := map[string][]dns.RR{}
	var order []string
	for _, rr := range chunk {
		if err := zonerules.CheckRecord(origin, rr); err != nil {
			return err
		}
		h := rr.Header()
		name := strings.ToLower(h.Name)
		if h.Rrtype == dns.TypeSOA && name != origin {
			return zonerules.SOABelowApex(h.Name, origin)
		}
		rrs, ok := byName[name]
		if !ok {
			if b != nil {
				var err error
				if rrs, err = RRsAt(b, name); err != nil {
					return err
				}
			}
			order = append(order, name)
		}
		if h.Rrtype == dns.TypeSOA && hasType(rrs, dns.TypeSOA) {
			// A second SOA, a duplicate too, which the staged
			// records do not keep (loadRR): CheckApex's refusal.
			return zonerules.CheckApexSoFar(origin, []dns.RR{rr, rr})
		}
		if h.Rrtype == dns.TypeCNAME || h.Rrtype == dns.TypeDNAME {
			for _, other := range rrs {
				if other.Header().Rrtype == h.Rrtype && !dns.IsDuplicate(other, rr) {
					return zonerules.TwoAliases(h.Name, h.Rrtype)
				}
			}
		}
		byName[name] = loadRR(rrs, rr)
	}
	for _, name := range order {
		rrs := byName[name]
		if name == origin {
			if err := zonerules.CheckApexSoFar(origin, rrs); err != nil {
				return err
			}
		}
		if err := zonerules.CheckName(name, rrs); err != nil {
			return err
		}
		if hasType(rrs, dns.TypeDNAME) {
			if err := zonerules.CheckDNAME(origin, name, rrs); err != nil {
				return err
			}
		}
	}
	return nil
}

// CheckStagedApex checks the apex of zone origin as staged in b
// (zonerules.CheckApex).
func CheckStagedApex(b *bolt.Bucket, origin string) error {
	apex, err := RRsAt(b, origin)
	if err != nil {
		return err
	}
	return zonerules.CheckApex(origin, apex)
}

// CheckStagedDNAMEs checks that no name staged in b stands below a DNAME
// owner (RFC 6672 section 2.3, zonerules.BelowDNAME), reading at most
// limit names from key from (nil: the first) in key order, where the names
// below a name follow it: owner is the key of the DNAME owner whose names
// the previous call was in (nil: none). It returns where the next call
// starts (nil: done) and its owner.
func CheckStagedDNAMEs(b *bolt.Bucket, from, owner []byte, limit int) (next, nextOwner []byte, err error) {
	c := b.Cursor()
	k, v := c.First()
	if from != nil {
		k, v = c.Seek(from)
	}
	for n := 0; k != nil; k, v = c.Next() {
		if n == limit {
			return bytes.Clone(k), owner, nil
		}
		n++
		if v == nil {
			continue
		}
		if owner != nil {
			if len(k) > len(owner) && bytes.HasPrefix(k, owner) {
				return nil, nil, zonerules.BelowDNAME(string(dnsname.KeyName(k)), string(dnsname.KeyName(owner)))
			}
			owner = nil
		}
		dname := false
		if _, err := ScanRRs(v, func(t uint16) { dname = dname || t == dns.TypeDNAME }); err != nil {
			return nil, nil, err
		}
		if dname {
			owner = bytes.Clone(k)
		}
	}
	return nil, nil, nil
}

// stagedTxs records, per database, the write transaction that wrote a
// staging bucket and the zones it wrote them for (noteStaged), for the
// commit to know whether it may move the staged bucket (stagedHere). A
// database has one write transaction at a time, applied by one goroutine:
// its entry is touched by that goroutine alone. An entry goes when its
// transaction commits; one a rollback left is replaced by the next
// transaction of its database that stages.
var stagedTxs sync.Map // *bolt.DB → *stagedTx

type stagedTx struct {
	tx    *bolt.Tx
	zones map[string]bool
}

// noteStaged records that g's transaction wrote the staging bucket of
// zone.
func noteStaged(g *bolt.Bucket, zone string) {
	tx := g.Tx()
	if v, ok := stagedTxs.Load(tx.DB()); ok && v.(*stagedTx).tx == tx {
		v.(*stagedTx).zones[zone] = true
		return
	}
	db := tx.DB()
	s := &stagedTx{tx: tx, zones: map[string]bool{zone: true}}
	stagedTxs.Store(db, s)
	tx.OnCommit(func() { stagedTxs.CompareAndDelete(db, s) })
}

// stagedHere reports whether g's transaction wrote the staging bucket of
// zone.
func stagedHere(g *bolt.Bucket, zone string) bool {
	tx := g.Tx()
	v, ok := stagedTxs.Load(tx.DB())
	return ok && v.(*stagedTx).tx == tx && v.(*stagedTx).zones[zone]
}
