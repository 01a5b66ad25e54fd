package zoneapi

import (
	"net/http"

	"github.com/craftdns/craftdns/internal/policy"

	"github.com/miekg/dns"
)

// The policy paths of the contract (internal/policy): a name's
// request-routing policy for a type, and the zone's region table.
const (
	PolicyPattern  = "/v1/zones/{zone}/policies/{name}/{type}"
	RegionsPattern = "/v1/zones/{zone}/regions"
)

// PolicyChanged is the reply to a policy write: the zone's serial after it.
type PolicyChanged struct {
	Zone   string `json:"zone"`
	Name   string `json:"name"`
	Type   string `json:"type"`
	Serial uint32 `json:"serial"`
}

// PolicyParams reads the owner name (relative to origin, or absolute; "@"
// is the apex) and the type (A or AAAA) of a policy path.
func PolicyParams(r *http.Request, origin string) (string, uint16, error) {
	name, err := AbsName(origin, r.PathValue("name"))
	if err != nil {
		return "", 0, err
	}
	t, ok := policy.TypeName(r.PathValue("type"))
	if !ok {
		return "", 0, BadRequest("type %q: policies answer A and AAAA queries", r.PathValue("type"))
	}
	return name, t, nil
}

// PolicyOwner checks that name, in zone origin, may hold a policy: it
// holds no CNAME (RFC 1034 section 3.6.2), is no delegation and is not
// below one or below a DNAME, where its records would never be answered.
// rrs reads the zone's RRset of a type at a name (nil for none).
func PolicyOwner(origin, name string, rrs func(name string, t uint16) []dns.RR) error {
	if len(rrs(name, dns.TypeCNAME)) > 0 {
		return Errorf(http.StatusConflict, "%s holds a CNAME: a policy's records cannot stand beside it", name)
	}
	if name == origin {
		return nil
	}
	if len(rrs(name, dns.TypeNS)) > 0 {
		return Errorf(http.StatusConflict, "%s is a delegation (NS records): its addresses are the child zone's", name)
	}
	for off, end := dns.NextLabel(name, 0); !end; off, end = dns.NextLabel(name, off) {
		parent := name[off:]
		if parent == origin || !dns.IsSubDomain(origin, parent) {
			break
		}
		if len(rrs(parent, dns.TypeNS)) > 0 {
			return Errorf(http.StatusConflict, "%s is below the delegation at %s: the child zone answers for it", name, parent)
		}
		if len(rrs(parent, dns.TypeDNAME)) > 0 {
			return Errorf(http.StatusConflict, "%s is below the DNAME at %s (RFC 6672 section 2.3)", name, parent)
		}
	}
	return nil
}
