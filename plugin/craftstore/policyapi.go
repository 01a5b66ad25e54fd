package craftstore

import (
	"context"
	"io"
	"net/http"

	"github.com/craftdns/craftdns/internal/httpapi"
	"github.com/craftdns/craftdns/internal/policy"
	"github.com/craftdns/craftdns/internal/shardproto"
	"github.com/craftdns/craftdns/internal/zoneapi"
	"github.com/craftdns/craftdns/plugin/craftstore/replica"
	"github.com/craftdns/craftdns/plugin/craftstore/zone"

	"github.com/miekg/dns"
)

// The policy API (internal/policy): request-routing policies and the
// zone's region table, written as RFC 2136 UPDATEs through Raft so that a
// policy and the records that go with it change in one entry. A write
// reads the name's policies and makes them the UPDATE's prerequisites: a
// concurrent write of the same name fails them, and the write reads again
// (at most policyTries times) instead of overwriting what it did not see.

// policyTries bounds the reads and UPDATEs of one policy write that
// concurrent writes of its name make fail.
const policyTries = 5

func (a *apiServer) registerPolicies(mux *http.ServeMux) {
	mux.HandleFunc("PUT "+zoneapi.PolicyPattern, httpapi.Body(httpapi.JSON, a.putPolicy))
	mux.HandleFunc("GET "+zoneapi.PolicyPattern, a.getPolicy)
	mux.HandleFunc("DELETE "+zoneapi.PolicyPattern, a.deletePolicy)
	mux.HandleFunc("PUT "+zoneapi.RegionsPattern, httpapi.Body(httpapi.JSON, a.putRegions))
	mux.HandleFunc("GET "+zoneapi.RegionsPattern, a.getRegions)
}

// policyTarget reads the zone, owner name and type of a policy path.
func (a *apiServer) policyTarget(r *http.Request) (origin, name string, t uint16, err error) {
	if origin, err = a.existingZone(r); err != nil {
		return "", "", 0, err
	}
	name, t, err = zoneapi.PolicyParams(r, origin)
	return origin, name, t, err
}

func (a *apiServer) putPolicy(w http.ResponseWriter, r *http.Request) {
	origin, name, t, err := a.policyTarget(r)
	if err != nil {
		fail(w, err)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, zoneapi.MaxRecordsBody))
	if err != nil {
		fail(w, err)
		return
	}
	p := new(policy.Policy)
	if err := policy.Decode(body, p); err != nil {
		fail(w, zoneapi.BadRequest("%v", err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	serial, err := a.writePolicy(a.late(ctx, origin, shardproto.Records, name), origin, name, t, func(z *zone.Zone) ([]dns.RR, []dns.RR, error) {
		regions, regionsRR := zoneRegions(z)
		if err := p.Validate(t, regions); err != nil {
			return nil, nil, zoneapi.BadRequest("%v", err)
		}
		if err := zoneapi.PolicyOwner(origin, name, z.RRs); err != nil {
			return nil, nil, err
		}
		prr, err := policy.Record(name, t, p)
		if err != nil {
			return nil, nil, zoneapi.BadRequest("%v", err)
		}
		var prereq []dns.RR
		if usesRegions(p) && regionsRR != nil {
			// The regions checked are those the policy is written with.
			prereq = append(prereq, regionsRR)
		}
		old := policy.Find(z.RRs(name, policy.TypePolicy), t)
		updates := policy.Replace(name, t, old, prr, p.Defaults(name, t))
		if h := policy.FindHealth(z.RRs(name, policy.TypeHealth), t); h != nil && p.Check == nil {
			// Nothing checks the values any more. With a check, the
			// leader's checker brings the state up to date.
			updates = append(updates, policy.Deletion(h))
		}
		return prereq, updates, nil
	})
	if err != nil {
		fail(w, err)
		return
	}
	noticeChange(r.Context(), a.leases, a.rep, origin, shardproto.Records, name)
	httpapi.WriteJSON(w, http.StatusOK, zoneapi.PolicyChanged{Zone: origin, Name: name, Type: dns.TypeToString[t], Serial: serial})
}

func (a *apiServer) deletePolicy(w http.ResponseWriter, r *http.Request) {
	origin, name, t, err := a.policyTarget(r)
	if err != nil {
		fail(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	serial, err := a.writePolicy(a.late(ctx, origin, shardproto.Records, name), origin, name, t, func(z *zone.Zone) ([]dns.RR, []dns.RR, error) {
		old := policy.Find(z.RRs(name, policy.TypePolicy), t)
		if old == nil {
			return nil, nil, replica.Errorf(replica.ErrNotFound, "%s has no %s policy", name, dns.TypeToString[t])
		}
		updates := []dns.RR{policy.Deletion(old)}
		if h := policy.FindHealth(z.RRs(name, policy.TypeHealth), t); h != nil {
			updates = append(updates, policy.Deletion(h))
		}
		return nil, updates, nil
	})
	if err != nil {
		fail(w, err)
		return
	}
	noticeChange(r.Context(), a.leases, a.rep, origin, shardproto.Records, name)
	httpapi.WriteJSON(w, http.StatusOK, zoneapi.PolicyChanged{Zone: origin, Name: name, Type: dns.TypeToString[t], Serial: serial})
}

// writePolicy writes a policy change of name in zone origin: build reads
// the zone and returns the UPDATE's own prerequisites and its updates; the
// name's policy RRset as read is a prerequisite too. A write that a
// concurrent one made fail reads again.
func (a *apiServer) writePolicy(ctx context.Context, origin, name string, t uint16, build func(*zone.Zone) ([]dns.RR, []dns.RR, error)) (uint32, error) {
	for try := 0; ; try++ {
		z := a.rep.Zone(origin)
		if z == nil {
			return 0, replica.Errorf(replica.ErrNotFound, "zone %q not found", origin)
		}
		prereq, updates, err := build(z)
		if err != nil {
			return 0, err
		}
		prereq = append(prereq, policy.Unchanged(name, z.RRs(name, policy.TypePolicy))...)
		if name != origin {
			// A CNAME or a delegation here would make RFC 2136 ignore
			// the records, or occlude them: PolicyOwner checked, this
			// holds it to the commit.
			prereq = append(prereq, policy.Absent(name, dns.TypeCNAME), policy.Absent(name, dns.TypeNS))
		}
		rcode, serial, err := a.rep.Update(ctx, origin, prereq, updates)
		if err != nil {
			return 0, err
		}
		switch rcode {
		case dns.RcodeSuccess:
			return serial, nil
		case dns.RcodeYXRrset, dns.RcodeNXRrset:
			if try+1 < policyTries {
				continue // changed since it was read: read again
			}
			return 0, replica.Errorf(replica.ErrConflict, "%s changed %d times while its %s policy was written: try again", name, policyTries, dns.TypeToString[t])
		}
		return 0, replica.Errorf(replica.ErrConflict, "the policy write of %s was refused: %s", name, dns.RcodeToString[rcode])
	}
}

func (a *apiServer) getPolicy(w http.ResponseWriter, r *http.Request) {
	origin, name, t, err := a.policyTarget(r)
	if err != nil {
		fail(w, err)
		return
	}
	rr := policy.Find(a.rep.Zone(origin).RRs(name, policy.TypePolicy), t)
	if rr == nil {
		fail(w, replica.Errorf(replica.ErrNotFound, "%s has no %s policy", name, dns.TypeToString[t]))
		return
	}
	p, _, err := policy.Read(rr)
	if err != nil {
		fail(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, p)
}

func (a *apiServer) putRegions(w http.ResponseWriter, r *http.Request) {
	origin, err := a.existingZone(r)
	if err != nil {
		fail(w, err)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, zoneapi.MaxRecordsBody))
	if err != nil {
		fail(w, err)
		return
	}
	rr, err := policy.ParseRegions(origin, body)
	if err != nil {
		fail(w, zoneapi.BadRequest("%v", err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	rcode, serial, err := a.rep.Update(a.late(ctx, origin, shardproto.Records, origin), origin, nil, policy.ReplaceRegions(origin, rr))
	if err == nil && rcode != dns.RcodeSuccess {
		err = replica.Errorf(replica.ErrConflict, "the region table write was refused: %s", dns.RcodeToString[rcode])
	}
	if err != nil {
		fail(w, err)
		return
	}
	noticeChange(r.Context(), a.leases, a.rep, origin, shardproto.Records, origin)
	httpapi.WriteJSON(w, http.StatusOK, zoneapi.Changed{Zone: origin, Serial: serial})
}

func (a *apiServer) getRegions(w http.ResponseWriter, r *http.Request) {
	origin, err := a.existingZone(r)
	if err != nil {
		fail(w, err)
		return
	}
	regions, _ := zoneRegions(a.rep.Zone(origin))
	if regions == nil {
		regions = &policy.Regions{Regions: map[string][]string{}}
	}
	httpapi.WriteJSON(w, http.StatusOK, regions)
}

// zoneRegions returns z's region table and its record, nil when it has
// none.
func zoneRegions(z *zone.Zone) (*policy.Regions, dns.RR) {
	rrs := z.RRs(z.Origin(), policy.TypeRegions)
	if len(rrs) == 0 {
		return nil, nil
	}
	r, err := policy.ReadRegions(rrs[0])
	if err != nil {
		return nil, nil
	}
	return r, rrs[0]
}

func usesRegions(p *policy.Policy) bool {
	for _, r := range p.Rules {
		if len(r.Regions) > 0 {
			return true
		}
	}
	return false
}
