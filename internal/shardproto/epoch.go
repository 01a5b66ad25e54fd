package shardproto

import (
	"encoding/binary"

	"github.com/miekg/dns"
)

// Map epochs: fencing routers by the shard map (internal/shardmap). Every
// query, lease request and UPDATE a router sends a member carries the
// epoch of the map it routed by, and whether it sent it to the shard as the
// owner of the name (a query for the name, a write) or as one of every
// shard (a fan-out's facts). A member whose map is newer either refuses
// (REFUSED, the Extended DNS Error Not Authoritative, and this option with
// its epoch and the fenced flag), when the router's map would place the
// name elsewhere or the placement changed since (shardmap.Place.Fence), or
// answers and adds this option with its epoch, a notice the router reads
// the map after. A router that is fenced reads the map and asks again
// once.
//
// No MAC: whoever forges the option in a query only has that query judged
// by another epoch, and a forged answer only makes a router read the map
// from the members (rate-limited) and ask again once.

// EpochCode is the EDNS0 option with a map epoch: in a query 8 bytes (big
// endian) and a flags byte (flagOwner), in an answer 8 bytes and a flags
// byte (flagFenced).
const EpochCode uint16 = Code + 5

const (
	flagOwner  = 1 // query: sent to the shard as the name's owner
	flagFenced = 1 // answer: refused by the fence
)

// SetEpoch sets, in query m, the epoch of the map the router routed it by,
// and whether it went to the shard as the owner of its name; m without an
// OPT record gets one. A previous epoch option is replaced.
func SetEpoch(m *dns.Msg, epoch uint64, owner bool) {
	if epoch == 0 {
		return
	}
	var f byte
	if owner {
		f = flagOwner
	}
	setEpoch(m, epoch, f)
}

func setEpoch(m *dns.Msg, epoch uint64, flags byte) {
	opt := m.IsEdns0()
	if opt == nil {
		m.SetEdns0(dns.DefaultMsgSize, false)
		opt = m.IsEdns0()
	}
	data := binary.BigEndian.AppendUint64(make([]byte, 0, 9), epoch)
	data = append(data, flags)
	for i, o := range opt.Option {
		if o.Option() == EpochCode {
			opt.Option[i] = &dns.EDNS0_LOCAL{Code: EpochCode, Data: data}
			return
		}
	}
	opt.Option = append(opt.Option, &dns.EDNS0_LOCAL{Code: EpochCode, Data: data})
}

// epochOf reads the epoch option of m.
func epochOf(m *dns.Msg) (epoch uint64, flags byte, ok bool) {
	opt := m.IsEdns0()
	if opt == nil {
		return 0, 0, false
	}
	for _, o := range opt.Option {
		if l, isLocal := o.(*dns.EDNS0_LOCAL); isLocal && l.Code == EpochCode && len(l.Data) == 9 {
			return binary.BigEndian.Uint64(l.Data), l.Data[8], true
		}
	}
	return 0, 0, false
}

// RoutedEpoch returns the epoch query r was routed by (0 when it carries
// none) and whether it was sent to the shard as the owner of its name.
func RoutedEpoch(r *dns.Msg) (epoch uint64, owner bool) {
	e, f, ok := epochOf(r)
	if !ok {
		return 0, false
	}
	return e, f&flagOwner != 0
}

// AttachEpoch adds the member's map epoch to answer m, with the fenced
// flag when the member refuses m's query for the router's old map; m gets
// an OPT record when it has none.
func AttachEpoch(m *dns.Msg, epoch uint64, fenced bool) {
	var f byte
	if fenced {
		f = flagFenced
	}
	setEpoch(m, epoch, f)
}

// AnswerEpoch returns the member's map epoch answer m carries, and whether
// the member fenced the query; ok is false when m carries none.
func AnswerEpoch(m *dns.Msg) (epoch uint64, fenced, ok bool) {
	e, f, ok := epochOf(m)
	return e, ok && f&flagFenced != 0, ok
}
