package replica

import (
	"context"

	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"

	bolt "go.etcd.io/bbolt"
)

// KeysVersion changes whenever a zone's DNSSEC keys may have changed (a
// key set committed, a zone deleted, a snapshot installed): a reader that
// keeps keys it read with ZoneKeys reads them again when it differs.
func (r *Replica) KeysVersion() uint64 { return r.keysVersion.Load() }

// ZoneKeys returns zone's DNSSEC key set as the member applied it
// (fsm.KeySet, JSON), nil when the zone has none.
func (r *Replica) ZoneKeys(zone string) ([]byte, error) {
	var out []byte
	err := r.db.View(func(tx *bolt.Tx) error {
		if b := fsm.ZoneKeys(fsm.Generation(tx), zone); b != nil {
			out = append([]byte(nil), b...)
		}
		return nil
	})
	return out, err
}

// SetKeys commits zone's key set (fsm.OpKeys); with absent, only when the
// zone has none (fsm.ErrConflict otherwise).
func (r *Replica) SetKeys(ctx context.Context, zone string, keys []byte, absent bool) error {
	_, err := r.propose(ctx, &fsm.Command{Op: fsm.OpKeys, Zone: zone, Keys: keys, Absent: absent})
	return err
}
