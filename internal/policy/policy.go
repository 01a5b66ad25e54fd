// Package policy is request routing in the replicated store: answers of a
// name chosen per query from pools of weighted values, by rules that match
// the client's subnet or named region, with fallback between pools (the
// core of octoDNS's dynamic records and of MyXDNS's per-region
// distributions). Both plugins speak it: craftstore answers from it and
// serves its API, craftroute routes its writes and passes the client's
// subnet through.
//
// # Storage
//
// A policy is data of its zone, so that everything records get, it gets:
// a write commits through Raft atomically with the record changes it comes
// with, bumps the zone serial, is in snapshots, survives restarts, moves
// with its name between shards and is served alike by every member. It is
// a record of a private type (RFC 6895 section 3.1) at its owner name,
// kept in the generic form of RFC 3597 so that nothing below this package
// needs to know it:
//
//	TypePolicy  (65380) at the owner: the covered type (2 octets, A or
//	            AAAA) and the policy's canonical JSON; one per type;
//	TypeRegions (65381) at the apex: the zone's region table, canonical
//	            JSON (MyXDNS's regions: a name to a list of subnets).
//
// A policy write also replaces the owner's RRset of the covered type with
// the values of the default rule's pool (Policy.Defaults): what a zone
// transfer, a client that asks for no policy answer and a member of an
// older version serve. Queries never see the private types themselves:
// Reserved types answer as if absent, and transfers leave them out.
//
// # Answers
//
// A query's client is the address of its EDNS Client Subnet option (RFC
// 7871) when it has one, else its source (ClientOf). The first rule whose
// subnets (its own and its regions') hold the address picks a pool; the
// default rule, last, holds every client. The answer's ECS scope is the
// prefix length of the rule's subnet that held the address, 0 for the
// default rule: never the query's source prefix. A pool answers Count
// values drawn by weight among its values that are not down; a pool with
// none passes to its fallback, and when the whole chain is down the
// rule's pool answers with all of its values (fail open, as Route 53 and
// NS1 do).
package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"sort"
	"strings"

	"github.com/miekg/dns"
)

// Limits of one policy and of a region table. A policy or table is one
// record, whose RDATA holds at most 65,535 octets.
const (
	MaxPools      = 64
	MaxValues     = 64 // per pool
	MaxRules      = 100
	MaxSubnets    = 1000 // per policy, its rules' own subnets together
	MaxCount      = 16
	MaxWeight     = 1_000_000
	MaxRegions    = 256
	MaxRegionNets = 4096 // per table
	MaxEncoded    = 60_000
	DefaultTTL    = 60
	maxTTL        = 1<<31 - 1
	maxNameLen    = 63
	statusUp      = "up"
	statusDown    = "down"
	statusObey    = "obey"
)

var identRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,63}$`)

// Policy is the body of PUT /v1/zones/{zone}/policies/{name}/{type}, in
// octoDNS's dynamic record form.
type Policy struct {
	Pools map[string]*Pool `json:"pools"`
	Rules []*Rule          `json:"rules"`
	// Count is how many values one answer carries, drawn without
	// replacement (default 1).
	Count int `json:"count,omitempty"`
	// TTL is the answers' TTL where neither the rule nor the pool sets
	// one (default DefaultTTL).
	TTL uint32 `json:"ttl,omitempty"`
	// Check, when set, is the health check of the values whose status
	// is "obey" (health.go).
	Check *Check `json:"check,omitempty"`
}

// Pool is a set of weighted values and the pool to answer from when none
// of them is up.
type Pool struct {
	Values   []*Value `json:"values"`
	TTL      uint32   `json:"ttl,omitempty"`
	Fallback string   `json:"fallback,omitempty"`
}

// Value is one answer of a pool: an address of the covered type, its
// weight (default 1; 0 is never drawn while another value is up) and
// octoDNS's status: "up" and "down" force it, "obey" (or none) follows
// the policy's health check, up without one.
type Value struct {
	Value  string `json:"value"`
	Weight *int   `json:"weight,omitempty"`
	Status string `json:"status,omitempty"`
}

// Rule picks Pool for the clients in Subnets, in one of Regions (the
// zone's region table) or in one of Geos, as octoDNS spells them: a
// continent ("EU"), a country in it ("NA-US"), a subdivision of that
// ("NA-US-CA"), by the *geoip* plugin's database (its metadata); a rule
// with none of them is the default rule, the last. TTL, when set, is the
// TTL of the rule's answers.
type Rule struct {
	Subnets []string `json:"subnets,omitempty"`
	Regions []string `json:"regions,omitempty"`
	Geos    []string `json:"geos,omitempty"`
	Pool    string   `json:"pool"`
	TTL     uint32   `json:"ttl,omitempty"`
}

// continents are the continent codes of GeoIP databases (and octoDNS).
var continents = map[string]bool{"AF": true, "AN": true, "AS": true, "EU": true, "NA": true, "OC": true, "SA": true}

var geoRE = regexp.MustCompile(`^[A-Z]{2}(-[A-Z]{2}(-[A-Z0-9]{1,3})?)?$`)

// checkGeo checks a rule's geo: CONTINENT[-COUNTRY[-SUBDIVISION]].
func checkGeo(g string) error {
	if !geoRE.MatchString(g) || !continents[g[:2]] {
		return fmt.Errorf("%q is not a continent (AF AN AS EU NA OC SA), CONTINENT-COUNTRY or CONTINENT-COUNTRY-SUBDIVISION in ISO codes", g)
	}
	return nil
}

// Regions is the body of PUT /v1/zones/{zone}/regions: region names to
// their subnets.
type Regions struct {
	Regions map[string][]string `json:"regions"`
}

// Error is a policy or region table that cannot be stored, and why.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

func errorf(format string, a ...any) error { return &Error{Msg: fmt.Sprintf(format, a...)} }

// Covered reports whether policies may cover type t: A and AAAA.
func Covered(t uint16) bool { return t == dns.TypeA || t == dns.TypeAAAA }

// Decode reads a JSON document into v, refusing unknown fields and
// trailing data.
func Decode(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return errorf("bad JSON: %v", err)
	}
	if d.More() {
		return errorf("bad JSON: data after the document")
	}
	return nil
}

// Validate checks p for type t against the zone's region table (nil:
// none) and puts it in canonical form: defaults written out, subnets
// masked as given. It refuses weights below 0, a pool whose weights are
// all 0 without a fallback, fallback loops, unknown pools and regions,
// subnets of two rules with different pools that overlap, and a policy
// without a default rule last.
func (p *Policy) Validate(t uint16, regions *Regions) error {
	if !Covered(t) {
		return errorf("policies answer A and AAAA queries, not %s", dns.TypeToString[t])
	}
	if len(p.Pools) == 0 || len(p.Pools) > MaxPools {
		return errorf("a policy has 1 to %d pools, not %d", MaxPools, len(p.Pools))
	}
	if p.Count == 0 {
		p.Count = 1
	}
	if p.Count < 1 || p.Count > MaxCount {
		return errorf("count: %d is not between 1 and %d", p.Count, MaxCount)
	}
	if p.TTL == 0 {
		p.TTL = DefaultTTL
	}
	if p.TTL > maxTTL {
		return errorf("ttl: %d is over %d", p.TTL, maxTTL)
	}
	if p.Check != nil {
		if err := p.Check.check(); err != nil {
			return err
		}
	}
	for _, name := range sortedKeys(p.Pools) {
		if err := p.checkPool(name, t); err != nil {
			return err
		}
	}
	if err := p.checkFallbacks(); err != nil {
		return err
	}
	return p.checkRules(regions)
}

func (p *Policy) checkPool(name string, t uint16) error {
	pool := p.Pools[name]
	if !identRE.MatchString(name) {
		return errorf("pool %q: a name is 1 to %d letters, digits, - or _", name, maxNameLen)
	}
	if pool == nil || len(pool.Values) == 0 || len(pool.Values) > MaxValues {
		n := 0
		if pool != nil {
			n = len(pool.Values)
		}
		return errorf("pool %q: a pool has 1 to %d values, not %d", name, MaxValues, n)
	}
	if pool.TTL > maxTTL {
		return errorf("pool %q: ttl %d is over %d", name, pool.TTL, maxTTL)
	}
	if pool.Fallback != "" {
		if _, ok := p.Pools[pool.Fallback]; !ok {
			return errorf("pool %q: fallback %q is not a pool of the policy", name, pool.Fallback)
		}
	}
	seen := map[netip.Addr]bool{}
	total := 0
	for i, v := range pool.Values {
		if v == nil {
			return errorf("pool %q: values[%d] is empty", name, i)
		}
		a, err := netip.ParseAddr(v.Value)
		switch {
		case err != nil || a.Zone() != "":
			return errorf("pool %q: values[%d]: %q is not an IP address", name, i, v.Value)
		case t == dns.TypeA && !a.Is4():
			return errorf("pool %q: values[%d]: %q is not an IPv4 address (an A policy)", name, i, v.Value)
		case t == dns.TypeAAAA && !a.Is6():
			return errorf("pool %q: values[%d]: %q is not an IPv6 address (an AAAA policy)", name, i, v.Value)
		case seen[a]:
			return errorf("pool %q: values[%d]: %s is in the pool twice", name, i, a)
		}
		seen[a] = true
		v.Value = a.String()
		if v.Weight == nil {
			one := 1
			v.Weight = &one
		}
		if *v.Weight < 0 || *v.Weight > MaxWeight {
			return errorf("pool %q: values[%d]: weight %d is not between 0 and %d", name, i, *v.Weight, MaxWeight)
		}
		switch v.Status {
		case "", statusObey:
			v.Status = ""
		case statusUp, statusDown:
		default:
			return errorf("pool %q: values[%d]: status %q is not up, down or obey", name, i, v.Status)
		}
		total += *v.Weight
	}
	if total == 0 && pool.Fallback == "" {
		return errorf("pool %q: every weight is 0 and the pool has no fallback", name)
	}
	return nil
}

// checkFallbacks refuses a chain of fallbacks that comes back to a pool.
func (p *Policy) checkFallbacks() error {
	for _, name := range sortedKeys(p.Pools) {
		seen := map[string]bool{name: true}
		for next := p.Pools[name].Fallback; next != ""; next = p.Pools[next].Fallback {
			if seen[next] {
				return errorf("pool %q: its fallbacks come back to pool %q", name, next)
			}
			seen[next] = true
		}
	}
	return nil
}

func (p *Policy) checkRules(regions *Regions) error {
	if len(p.Rules) == 0 || len(p.Rules) > MaxRules {
		return errorf("a policy has 1 to %d rules, not %d", MaxRules, len(p.Rules))
	}
	type ruleNets struct {
		rule int
		nets []netip.Prefix
	}
	var all []ruleNets
	subnets := 0
	for i, r := range p.Rules {
		if r == nil {
			return errorf("rules[%d] is empty", i)
		}
		if _, ok := p.Pools[r.Pool]; !ok {
			return errorf("rules[%d]: pool %q is not a pool of the policy", i, r.Pool)
		}
		if r.TTL > maxTTL {
			return errorf("rules[%d]: ttl %d is over %d", i, r.TTL, maxTTL)
		}
		last := i == len(p.Rules)-1
		if len(r.Subnets) == 0 && len(r.Regions) == 0 && len(r.Geos) == 0 {
			if !last {
				return errorf("rules[%d] has no subnets, regions or geos: only the last rule is the default", i)
			}
			continue
		}
		if last {
			return errorf("rules[%d]: the last rule is the default one, for every client: it has no subnets, regions or geos", i)
		}
		for j, g := range r.Geos {
			if err := checkGeo(g); err != nil {
				return errorf("rules[%d].geos[%d]: %v", i, j, err)
			}
		}
		var nets []netip.Prefix
		for j, s := range r.Subnets {
			pfx, err := ParsePrefix(s)
			if err != nil {
				return errorf("rules[%d].subnets[%d]: %v", i, j, err)
			}
			r.Subnets[j] = pfx.String()
			nets = append(nets, pfx)
		}
		subnets += len(r.Subnets)
		for j, name := range r.Regions {
			if regions == nil || regions.Regions[name] == nil {
				return errorf("rules[%d].regions[%d]: region %q is not in the zone's region table (PUT /v1/zones/{zone}/regions)", i, j, name)
			}
			for _, s := range regions.Regions[name] {
				pfx, err := ParsePrefix(s)
				if err == nil {
					nets = append(nets, pfx)
				}
			}
		}
		all = append(all, ruleNets{i, nets})
	}
	if subnets > MaxSubnets {
		return errorf("the rules list %d subnets: at most %d (name larger sets as regions)", subnets, MaxSubnets)
	}
	// Two rules with different pools must not claim one client: the
	// order would decide silently.
	for a := 0; a < len(all); a++ {
		for b := a + 1; b < len(all); b++ {
			ra, rb := p.Rules[all[a].rule], p.Rules[all[b].rule]
			if ra.Pool == rb.Pool {
				continue
			}
			for _, x := range all[a].nets {
				for _, y := range all[b].nets {
					if x.Overlaps(y) {
						return errorf("rules[%d] (pool %q) and rules[%d] (pool %q) both hold %s and %s: subnets of rules with different pools must not overlap",
							all[a].rule, ra.Pool, all[b].rule, rb.Pool, x, y)
					}
				}
			}
		}
	}
	return nil
}

// ParsePrefix reads a subnet in CIDR notation; an address alone is its
// host prefix. Bits set past the prefix length are refused: they would
// say another subnet than the one meant.
func ParsePrefix(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("%q is not a subnet", s)
		}
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a subnet", s)
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("%q has bits set past its prefix length (%s?)", s, p.Masked())
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("%q: write IPv4 subnets in IPv4 form", s)
	}
	return p, nil
}

// Validate checks a region table and puts it in canonical form.
func (r *Regions) Validate() error {
	if r.Regions == nil {
		return errorf(`the body has no "regions" object`)
	}
	if len(r.Regions) > MaxRegions {
		return errorf("%d regions: at most %d", len(r.Regions), MaxRegions)
	}
	total := 0
	for _, name := range sortedKeys(r.Regions) {
		if !identRE.MatchString(name) {
			return errorf("region %q: a name is 1 to %d letters, digits, - or _", name, maxNameLen)
		}
		nets := r.Regions[name]
		if len(nets) == 0 {
			return errorf("region %q has no subnets", name)
		}
		for i, s := range nets {
			p, err := ParsePrefix(s)
			if err != nil {
				return errorf("region %q: subnets[%d]: %v", name, i, err)
			}
			nets[i] = p.String()
		}
		total += len(nets)
	}
	if total > MaxRegionNets {
		return errorf("the regions list %d subnets: at most %d", total, MaxRegionNets)
	}
	return nil
}

// Defaults returns the values of the default rule's pool as RRs of type t
// at owner: the records the owner holds beside its policy.
func (p *Policy) Defaults(owner string, t uint16) []dns.RR {
	def := p.Rules[len(p.Rules)-1]
	pool := p.Pools[def.Pool]
	ttl := firstTTL(def.TTL, pool.TTL, p.TTL)
	out := make([]dns.RR, 0, len(pool.Values))
	for _, v := range pool.Values {
		out = append(out, addrRR(owner, t, ttl, netip.MustParseAddr(v.Value)))
	}
	return out
}

// firstTTL returns the first TTL that is set.
func firstTTL(ttls ...uint32) uint32 {
	for _, t := range ttls {
		if t != 0 {
			return t
		}
	}
	return DefaultTTL
}

func addrRR(owner string, t uint16, ttl uint32, a netip.Addr) dns.RR {
	h := dns.RR_Header{Name: owner, Rrtype: t, Class: dns.ClassINET, Ttl: ttl}
	if t == dns.TypeA {
		b := a.As4()
		return &dns.A{Hdr: h, A: b[:]}
	}
	b := a.As16()
	return &dns.AAAA{Hdr: h, AAAA: b[:]}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
