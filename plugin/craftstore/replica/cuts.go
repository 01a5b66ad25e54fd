package replica

import (
	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"

	bolt "go.etcd.io/bbolt"
)

// Cut returns the cut a router recorded for serial of zone origin (the
// JSON it gave), nil when none is kept.
func (r *Replica) Cut(origin string, serial uint32) []byte {
	var cut []byte
	r.db.View(func(tx *bolt.Tx) error {
		cut = fsm.Cut(fsm.Generation(tx), origin, serial)
		return nil
	})
	return cut
}
