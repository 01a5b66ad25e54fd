package fsm

import (
	"encoding/binary"

	bolt "go.etcd.io/bbolt"
)

// The serial base of a zone (data.<n>/bases/<origin> -> 4 bytes, big
// endian) is the SOA serial the zone was last given explicitly: by an
// import, or by an SOA record written with a newer serial. Every other
// change raises the serial by one (bumpSerial), so the serial minus the
// base (RFC 1982 arithmetic) counts the changes since. In key mode "name"
// a zone spans shards that each keep their own serial; craftroute presents
// the highest base plus the sum of the counts, which rises with every
// change on any shard (its serial.go). A zone written before bases were
// kept gets one at its first change: the serial before it.
var bucketBases = []byte("bases")

// putBase records base as zone origin's serial base.
func putBase(g *bolt.Bucket, origin string, base uint32) error {
	b, err := g.CreateBucketIfNotExists(bucketBases)
	if err != nil {
		return err
	}
	return b.Put([]byte(origin), binary.BigEndian.AppendUint32(nil, base))
}

// SerialBase returns zone origin's serial base; ok is false when none is kept.
func SerialBase(g *bolt.Bucket, origin string) (base uint32, ok bool) {
	b := g.Bucket(bucketBases)
	if b == nil {
		return 0, false
	}
	v := b.Get([]byte(origin))
	if len(v) != 4 {
		return 0, false
	}
	return binary.BigEndian.Uint32(v), true
}

// deleteBase forgets zone origin's serial base (the zone was deleted).
func deleteBase(g *bolt.Bucket, origin string) error {
	if b := g.Bucket(bucketBases); b != nil {
		return b.Delete([]byte(origin))
	}
	return nil
}

// noteSerial keeps zone origin's serial base in line with a change that
// moved its serial from old to serial: an explicit serial (an SOA record
// written with a newer one) becomes the base; a bump keeps the base, or
// gives a zone without one the serial before the change.
func noteSerial(g *bolt.Bucket, origin string, old, serial uint32, explicit bool) error {
	if explicit {
		return putBase(g, origin, serial)
	}
	if _, ok := SerialBase(g, origin); ok {
		return nil
	}
	return putBase(g, origin, old)
}
