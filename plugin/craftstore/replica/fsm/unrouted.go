package fsm

import (
	"slices"
	"strings"

	"github.com/craftdns/craftdns/internal/shardmap"

	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
)

// Writes no router routed. In key mode "name" a shard holds the names the
// map places on it, and with every other shard the names every shard holds
// (the apex RRsets, delegations and the names at or below them, DNAMEs:
// SharedRRs). Routers send a name's writes to its owner, those of a name
// every shard holds to every shard, with their map's epoch (checkEpoch).
// A client that writes to a member directly (its HTTP API, an UPDATE) has
// no map: were the member to take a name the map places on another shard,
// no router would ever answer it (and a migration would not move it); a
// name every shard holds, written on one only, would make the shards
// disagree. So the member checks such a write before it proposes it
// (CheckUnrouted) and, when it passes, proposes it with its own map's
// epoch, which checkEpoch judges when it is applied: a write whose name a
// migration moved away meanwhile is refused then. The check is the
// proposer's, not the state machine's: members of one group apply every
// entry alike whatever version each runs (a rolling upgrade).

// CheckUnrouted checks write c (OpChange or OpUpdate) of zone c.Zone that
// no router routed, against the map and zone data in g: it is refused
// with ErrWrongShard when it reads or writes a name this shard does not
// hold alone. epoch is the epoch to propose it with: the map's when the
// shard is one of several in key mode "name", else 0 (a shard outside any
// map, alone in its map, or in key mode "zone" takes every write).
func CheckUnrouted(g *bolt.Bucket, c *Command) (epoch uint64, err error) {
	b := g.Bucket(bucketShardMap)
	if b == nil || IndexedParts(g) == 0 {
		return 0, nil // no map, or key mode "zone"
	}
	shard := string(b.Get(keyMapShard))
	m, err := ShardMap(g)
	if err != nil || m == nil || shard == "" || len(m.Shards) < 2 && m.Migration == nil {
		return 0, err
	}
	if err := checkUnrouted(g, c, m, shard); err != nil {
		return 0, err
	}
	return m.Epoch, nil
}

func checkUnrouted(g *bolt.Bucket, c *Command, m *shardmap.Map, shard string) error {
	zb := g.Bucket(BucketZones).Bucket([]byte(c.Zone))
	if zb == nil {
		return nil // refused as any write of a missing zone
	}
	ring, err := m.Ring()
	if err != nil {
		return err
	}
	// what: a name and type written (dns.TypeANY: every RRset at it), or
	// read by a prerequisite (read).
	type what struct {
		name  string
		rtype uint16
		read  bool
	}
	var ws []what
	add := func(name string, rtype uint16, read bool) {
		ws = append(ws, what{strings.ToLower(dns.Fqdn(name)), rtype, read})
	}
	switch c.Op {
	case OpChange:
		for _, rr := range c.Add {
			add(rr.Header().Name, rr.Header().Rrtype, false)
		}
		for _, d := range c.Del {
			switch {
			case d.RR != nil:
				add(d.RR.Header().Name, d.RR.Header().Rrtype, false)
			case d.Type != 0:
				add(d.Name, d.Type, false)
			default:
				add(d.Name, dns.TypeANY, false)
			}
		}
	case OpUpdate:
		u := new(dns.Msg)
		if err := u.Unpack(c.Update); err != nil {
			return nil // refused as malformed when applied
		}
		for _, rr := range u.Answer {
			add(rr.Header().Name, rr.Header().Rrtype, true)
		}
		for _, rr := range u.Ns {
			add(rr.Header().Name, rr.Header().Rrtype, false)
		}
	default:
		return nil
	}
	for _, w := range ws {
		if !dns.IsSubDomain(c.Zone, w.name) {
			continue // refused as outside the zone when applied
		}
		shared, err := heldByEvery(zb, c.Zone, w.name, w.rtype)
		if err != nil {
			return err
		}
		switch owner := ring.Locate(w.name); {
		case shared && w.read:
			// Every shard holds it: read here as anywhere.
		case shared:
			return Errorf(ErrWrongShard, "%s %s is held by every shard (shard map epoch %d, key mode %q): write it through a router (craftroute), which writes it on every shard",
				w.name, typeText(w.rtype), m.Epoch, shardmap.KeyName)
		case owner != shard:
			return Errorf(ErrWrongShard, "%s is placed on shard %q, not on this shard %q (shard map epoch %d): write it through a router (craftroute), or to a member of shard %q",
				w.name, owner, shard, m.Epoch, owner)
		}
	}
	return nil
}

// heldByEvery reports whether every shard holds the records of type rtype
// (dns.TypeANY: any of them) at name (canonical) of zone origin (bucket
// zb) in key mode "name": the apex, a delegation's NS and DS, a DNAME,
// any name at or below a zone cut (SharedRRs).
func heldByEvery(zb *bolt.Bucket, origin, name string, rtype uint16) (bool, error) {
	switch rtype {
	case dns.TypeNS, dns.TypeDS, dns.TypeDNAME:
		return true, nil
	}
	if name == origin {
		return true, nil
	}
	rrs, err := RRsAt(zb, name)
	if err != nil {
		return false, err
	}
	if cut, err := underCut(zb, origin, name, rrs); err != nil || cut {
		return cut, err
	}
	// Beside a DNAME the name's other RRsets are its owner's alone; the
	// removal of every RRset removes the DNAME too.
	return rtype == dns.TypeANY && slices.ContainsFunc(rrs, func(rr dns.RR) bool { return rr.Header().Rrtype == dns.TypeDNAME }), nil
}

// typeText names rtype, "every RRset" for dns.TypeANY.
func typeText(rtype uint16) string {
	if rtype == dns.TypeANY {
		return "(every RRset)"
	}
	return dns.TypeToString[rtype]
}
