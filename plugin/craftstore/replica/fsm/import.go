package fsm

import (
	"encoding/binary"
	"strings"

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
	// The staged records are copied, not moved: bbolt's MoveBucket loses
	// what the same transaction wrote into the moved bucket (etcd-io/bbolt
	// PR 1239), and a follower catching up applies begin, chunks and commit
	// of one import in one transaction.
	zb, err := zones.CreateBucket([]byte(c.Zone))
	if err != nil {
		return Result{}, nil, err
	}
	records := 0
	err = b.ForEach(func(k, v []byte) error {
		records += countRRs(v)
		return zb.Put(k, v)
	})
	if err != nil {
		return Result{}, nil, err
	}
	if bumped {
		if err := putRRs(zb, c.Zone, apex); err != nil {
			return Result{}, nil, err
		}
	}
	if err := indexZone(g, IndexedParts(g), c.Zone, zb, true); err != nil {
		return Result{}, nil, err
	}
	if err := g.Bucket(bucketImports).DeleteBucket([]byte(c.Zone)); err != nil {
		return Result{}, nil, err
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
