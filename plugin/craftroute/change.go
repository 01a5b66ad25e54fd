package craftroute

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/policy"
	"github.com/craftdns/craftdns/internal/zoneapi"

	"github.com/miekg/dns"
)

// A record change through the router's API (POST /v1/zones/{zone}/records)
// in key mode "name": its body is parsed by the API contract (zoneapi) and
// its names are placed on the shards (split.go).

// splitChange parses a record change of zone origin (the body of POST
// /v1/zones/{zone}/records) and groups its additions and deletions by the
// shards that hold their names (key mode "name"). Errors are apiErrors for
// a bad body, errZoneAbsent, or failures to reach the shards.
func (c *Craftroute) splitChange(ctx context.Context, origin string, body []byte) (map[*Shard]*zoneapi.Change, error) {
	req, err := zoneapi.ReadChange(bytes.NewReader(body))
	if err == nil {
		err = zoneapi.CheckChangeSize(req, c.cfg.maxChange)
	}
	if err != nil {
		return nil, err
	}
	p := newPlacer(c, origin)
	adds := make([]placement, len(req.Add))
	for i, text := range req.Add {
		rr, err := zoneapi.ParseRecord(origin, text)
		if err != nil {
			return nil, zoneapi.BadRequest("add[%d]: %v", i, err)
		}
		if t := rr.Header().Rrtype; policy.Reserved(t) {
			return nil, zoneapi.BadRequest("add[%d]: %v", i, policy.RefuseReserved(t))
		}
		adds[i] = placement{dnsname.Lower(rr.Header().Name), rr.Header().Rrtype}
		switch rr := rr.(type) {
		case *dns.NS:
			p.addNS(rr)
		case *dns.SOA:
			// Every shard takes the serial, which must move the zone's
			// on (serial.go).
			if cur, ok := c.currentSerial(ctx, origin); ok {
				raiseSOA([]dns.RR{rr}, cur)
				req.Add[i] = rr.String()
			}
		}
	}
	dels := make([]placement, len(req.Delete))
	for i, raw := range req.Delete {
		pl, err := deletionPlacement(origin, raw)
		if err != nil {
			return nil, zoneapi.BadRequest("delete[%d]: %v", i, err)
		}
		dels[i] = pl
	}
	if err := p.resolve(ctx, append(slices.Clip(adds), dels...)); err != nil {
		return nil, err
	}
	if err := c.checkNewCuts(ctx, origin, p.newCuts); err != nil {
		return nil, err
	}
	parts := map[*Shard]*zoneapi.Change{}
	part := func(s *Shard) *zoneapi.Change {
		if parts[s] == nil {
			parts[s] = &zoneapi.Change{}
		}
		return parts[s]
	}
	for i, pl := range adds {
		for _, s := range p.shards(pl.name, pl.rrtype) {
			part(s).Add = append(part(s).Add, req.Add[i])
		}
	}
	for i, pl := range dels {
		for _, s := range p.shards(pl.name, pl.rrtype) {
			part(s).Delete = append(part(s).Delete, req.Delete[i])
		}
	}
	return parts, nil
}

// deletionPlacement reads a deletion (zoneapi.ParseDeletion) for its name
// and type (dns.TypeANY: every RRset).
func deletionPlacement(origin string, raw json.RawMessage) (placement, error) {
	d, err := zoneapi.ParseDeletion(origin, raw)
	switch {
	case err != nil:
		return placement{}, err
	case policy.Reserved(d.Type) || (d.RR != nil && policy.Reserved(d.RR.Header().Rrtype)):
		return placement{}, policy.RefuseReserved(max(d.Type, policy.TypePolicy))
	case d.RR != nil:
		return placement{dnsname.Lower(d.RR.Header().Name), d.RR.Header().Rrtype}, nil
	case d.Type == 0:
		return placement{d.Name, dns.TypeANY}, nil
	}
	return placement{d.Name, d.Type}, nil
}
