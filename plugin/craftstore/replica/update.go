package replica

import (
	"context"

	"github.com/craftdns/craftdns/internal/txn"
	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"

	"github.com/miekg/dns"
)

// Update proposes an UPDATE for zone with the prerequisite and update
// sections of the message, and returns the RFC 2136 rcode it got and the
// zone's serial after it.
func (r *Replica) Update(ctx context.Context, zone string, prereq, updates []dns.RR) (int, uint32, error) {
	packed, err := txn.PackUpdate(prereq, updates)
	if err != nil {
		return dns.RcodeFormatError, 0, Errorf(ErrInvalid, "packing update: %v", err)
	}
	res, err := r.proposeUnlocked(ctx, &fsm.Command{Op: fsm.OpUpdate, Zone: zone, Update: packed})
	return res.Rcode, res.Serial, err
}
