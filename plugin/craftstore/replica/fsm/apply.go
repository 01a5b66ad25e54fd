package fsm

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/shardmap"
	"github.com/craftdns/craftdns/internal/zonerules"
	"github.com/craftdns/craftdns/plugin/craftstore/zone"

	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
)

// Result is what applying a command produced, handed back to its proposer.
type Result struct {
	Rcode   int    // OpUpdate: the RFC 2136 rcode
	Serial  uint32 // the zone's SOA serial after the change
	Records int    // records in the zone after an import
	Skipped bool   // an import with Absent set found the zone present
	Outcome byte   // OpTxCommit, OpTxAbort, OpTxDecide: the transaction's outcome (txn.go)
	Held    bool   // OpTxUnfence: the fence still held (fence.go)
}

// Effect is what the in-memory views must do once the transaction that
// applied the entry has committed.
type Effect struct {
	Zone    string
	Names   []zone.NameRecords // OpChange
	Reload  bool               // OpImportCommit: rebuild the view from bbolt
	Deleted bool               // OpDeleteZone
	Member  *Member            // OpMemberInfo and conf changes
	Removed uint64             // conf change: member removed
	Seeded  bool               // OpImportCommit of a seed: the group has seeded zone
	Base    uint32             // the zone's serial base after the change, when HasBase (serialbase.go)
	HasBase bool
	Tx      *TxEffect       // a transaction's part prepared or finished (txn.go)
	Map     *shardmap.Place // OpMapSet committed: the shard map's new epoch, and this shard's place in it
	Keys    bool            // OpKeys: the zone's DNSSEC keys changed (keys.go)
	// More are the effects of a map part's moves (txn.go), to be applied
	// before this one's (which unlocks their names).
	More []*Effect
}

// Apply applies c to generation g inside a write transaction, then
// trims the changed zone's IXFR journal to journal changes. A refusal is
// returned as *Error with g unchanged.
func Apply(g *bolt.Bucket, c *Command, journal int) (Result, *Effect, error) {
	res, eff, err := applyOp(g, c)
	if err != nil || eff == nil {
		return res, eff, err
	}
	trim := func(e *Effect) error {
		if e.Zone == "" || e.Deleted {
			return nil
		}
		e.Base, e.HasBase = SerialBase(g, e.Zone)
		return journalTrim(g, e.Zone, journal)
	}
	for _, e := range eff.More {
		if err := trim(e); err != nil {
			return res, eff, err
		}
	}
	return res, eff, trim(eff)
}

// applyOp applies c's operation to g.
func applyOp(g *bolt.Bucket, c *Command) (Result, *Effect, error) {
	if c.Epoch != 0 && fencedOp(c.Op) {
		if err := checkEpoch(g, c.Epoch, c); err != nil {
			return Result{}, nil, err
		}
		if err := checkMigrating(g, c.Op); err != nil {
			return Result{}, nil, err
		}
	}
	switch c.Op {
	case OpChange, OpUpdate:
		if err := checkUnlocked(g, c); err != nil {
			return Result{}, nil, err
		}
		return applyWrite(g, c, applyOpts{})
	case OpMapSet:
		return Result{}, nil, Errorf(ErrInvalid, "a shard map changes only as a part of a transaction over every shard")
	case OpTxPrepare:
		return applyTxPrepare(g, c)
	case OpTxCommit:
		return applyTxCommit(g, c)
	case OpTxAbort:
		return applyTxAbort(g, c)
	case OpTxDecide:
		return applyTxDecide(g, c)
	case OpTxFence:
		return applyTxFence(g, c)
	case OpTxUnfence:
		return applyTxUnfence(g, c)
	case OpImportBegin:
		return applyImportBegin(g, c)
	case OpImportChunk:
		return applyImportChunk(g, c)
	case OpImportCommit:
		return applyImportCommit(g, c)
	case OpDeleteZone:
		if g.Bucket(BucketZones).Bucket([]byte(c.Zone)) == nil {
			return Result{}, nil, Errorf(ErrNotFound, "zone %q not found", c.Zone)
		}
		eff, err := deleteZone(g, c.Zone)
		return Result{}, eff, err
	case OpKeys:
		return applyKeys(g, c, applyOpts{})
	case OpMemberInfo:
		// A member advertises its DNS and API addresses. Its Raft address
		// is the group's (the peer lines, or the membership change that
		// added it) and stays: the advertiser knows only the address it
		// listens on, which need not be the one its peers reach it by.
		v := g.Bucket(BucketMembers).Get(IDKey(c.Member.ID))
		if v == nil {
			return Result{}, nil, nil // removed meanwhile
		}
		var m Member
		if err := json.Unmarshal(v, &m); err != nil {
			return Result{}, nil, err
		}
		m.DNS, m.API = c.Member.DNS, c.Member.API
		return Result{}, nil, PutMember(g, m)
	}
	return Result{}, nil, Errorf(ErrInvalid, "unknown command %d", c.Op)
}

// deleteZone removes zone, which exists, with its index entries, journal
// and serial base.
func deleteZone(g *bolt.Bucket, zone string) (*Effect, error) {
	zb := g.Bucket(BucketZones)
	if err := indexZone(g, IndexedParts(g), zone, zb.Bucket([]byte(zone)), false); err != nil {
		return nil, err
	}
	if err := zb.DeleteBucket([]byte(zone)); err != nil {
		return nil, err
	}
	if err := journalReset(g, zone); err != nil {
		return nil, err
	}
	if err := deleteBase(g, zone); err != nil {
		return nil, err
	}
	if err := deleteKeys(g, zone); err != nil {
		return nil, err
	}
	return &Effect{Zone: zone, Deleted: true}, nil
}

// RRsAt reads and decodes the RRs stored under name in bucket b.
func RRsAt(b *bolt.Bucket, name string) ([]dns.RR, error) {
	v := b.Get(nameKey(name))
	if v == nil {
		return nil, nil
	}
	return DecodeRRs(v)
}

func putRRs(b *bolt.Bucket, name string, rrs []dns.RR) error {
	if len(rrs) == 0 {
		return b.Delete(nameKey(name))
	}
	v, err := EncodeRRs(rrs)
	if err != nil {
		return err
	}
	return b.Put(nameKey(name), v)
}

// applyOpts modify how a write is applied.
type applyOpts struct {
	dry         bool // evaluate only: check everything, write nothing (a transaction's prepare)
	skipPrereqs bool // the prerequisites held at prepare and their names stayed locked (a commit)
	// verbatim adds records as they are, TTLs included (a migration's
	// move: the records were stored so on the shard they come from,
	// an RRset's TTLs apart as a zone file may give them).
	verbatim bool
}

// applyWrite applies an OpChange, OpUpdate, OpMapSet or OpKeys command
// (the kinds of a transaction's part).
func applyWrite(g *bolt.Bucket, c *Command, o applyOpts) (Result, *Effect, error) {
	switch c.Op {
	case OpUpdate:
		return applyUpdate(g, c, o)
	case OpMapSet:
		return applyMapSet(g, c, o)
	case OpKeys:
		return applyKeys(g, c, o)
	}
	return applyChange(g, c, o)
}

// applyChange applies an atomic record change: deletions first, then
// additions, then the zone invariants are checked and the SOA serial bumped.
func applyChange(g *bolt.Bucket, c *Command, o applyOpts) (Result, *Effect, error) {
	zb := g.Bucket(BucketZones).Bucket([]byte(c.Zone))
	if zb == nil {
		return Result{}, nil, Errorf(ErrNotFound, "zone %q not found", c.Zone)
	}
	w := newWorkset(zb)
	names := w.names
	zoneName := dnsname.Lower(dns.Fqdn(c.Zone))
	load := func(name string) ([]dns.RR, error) {
		name = strings.ToLower(dns.Fqdn(name))
		if !dnsname.In(name, zoneName) {
			return nil, Errorf(ErrInvalid, "name %q is outside zone %q", name, c.Zone)
		}
		return w.get(name)
	}
	apex, err := load(c.Zone)
	if err != nil {
		return Result{}, nil, err
	}
	oldSerial, _ := soaSerial(apex)

	for _, d := range c.Del {
		name := d.Name
		if d.RR != nil {
			name = d.RR.Header().Name
		}
		rrs, err := load(name)
		if err != nil {
			return Result{}, nil, err
		}
		key := strings.ToLower(dns.Fqdn(name))
		apex := key == c.Zone
		switch {
		case d.RR != nil:
			if apex && (d.RR.Header().Rrtype == dns.TypeSOA) {
				return Result{}, nil, Errorf(ErrInvalid, "the SOA record cannot be deleted")
			}
			names[key] = removeRRs(rrs, func(rr dns.RR) bool { return dns.IsDuplicate(rr, d.RR) })
		case d.Type != 0:
			if apex && (d.Type == dns.TypeSOA || d.Type == dns.TypeNS) {
				return Result{}, nil, Errorf(ErrInvalid, "the apex %s RRset cannot be deleted", dns.TypeToString[d.Type])
			}
			names[key] = removeRRs(rrs, func(rr dns.RR) bool { return rr.Header().Rrtype == d.Type })
		default:
			if apex {
				return Result{}, nil, Errorf(ErrInvalid, "the zone apex cannot be deleted (it holds the SOA and NS records)")
			}
			names[key] = nil
		}
	}

	var newSOA *dns.SOA
	for _, rr := range c.Add {
		rrs, err := load(rr.Header().Name)
		if err != nil {
			return Result{}, nil, err
		}
		key := strings.ToLower(dns.Fqdn(rr.Header().Name))
		if soa, ok := rr.(*dns.SOA); ok {
			if key != c.Zone {
				return Result{}, nil, Errorf(ErrInvalid, "SOA record at %q is not at the zone apex", key)
			}
			newSOA = soa
		}
		if o.verbatim {
			names[key] = addVerbatim(rrs, rr)
		} else {
			names[key] = addRR(rrs, rr)
		}
	}

	for _, name := range w.order {
		if err := checkName(name, names[name]); err != nil {
			return Result{}, nil, err
		}
	}
	if err := checkDNAMEs(zb, c.Zone, names, w.order); err != nil {
		return Result{}, nil, err
	}
	apex = names[c.Zone]
	if err := checkApex(c.Zone, apex); err != nil {
		return Result{}, nil, err
	}
	apex, serial := bumpSerial(apex, oldSerial, newSOA)
	names[c.Zone] = apex
	if o.dry {
		return Result{Serial: serial}, nil, nil
	}
	explicit := newSOA != nil && zonerules.SerialAfter(newSOA.Serial, oldSerial)
	if err := noteSerial(g, c.Zone, oldSerial, serial, explicit); err != nil {
		return Result{}, nil, err
	}

	e, err := writeNames(g, c.Zone, w)
	if err != nil {
		return Result{}, nil, err
	}
	return Result{Serial: serial}, e, nil
}

// writeNames stores the new RRs of the names a change touched, journals the
// difference from what was stored for IXFR, and returns the effect on the
// views.
func writeNames(g *bolt.Bucket, origin string, w *workset) (*Effect, error) {
	e := &Effect{Zone: origin, Names: make([]zone.NameRecords, 0, len(w.order))}
	var removed, added []dns.RR
	parts := IndexedParts(g)
	for _, name := range w.order {
		rrs := w.names[name]
		removed, added = diffRRs(removed, added, w.stored[name], rrs)
		if err := putRRs(w.zb, name, rrs); err != nil {
			return nil, err
		}
		if (len(rrs) == 0) != (len(w.stored[name]) == 0) {
			if err := indexName(g, parts, origin, name, len(rrs) > 0); err != nil {
				return nil, err
			}
		}
		e.Names = append(e.Names, zone.NameRecords{Name: name, RRs: rrs, Old: len(w.stored[name])})
	}
	if err := journalAppend(g, origin, removed, added); err != nil {
		return nil, err
	}
	return e, nil
}

// diffRRs appends to removed the RRs of before missing from after, and to
// added those of after missing from before (a TTL change counts as both),
// in the form IXFR wants (RFC 1995 §4): the old SOA among the removed, the
// new SOA among the added.
func diffRRs(removed, added, before, after []dns.RR) ([]dns.RR, []dns.RR) {
	same := func(a, b dns.RR) bool { return dns.IsDuplicate(a, b) && a.Header().Ttl == b.Header().Ttl }
	for _, b := range before {
		if !containsRR(after, b, same) {
			removed = append(removed, b)
		}
	}
	for _, a := range after {
		if !containsRR(before, a, same) {
			added = append(added, a)
		}
	}
	return removed, added
}

func containsRR(rrs []dns.RR, rr dns.RR, eq func(a, b dns.RR) bool) bool {
	for _, x := range rrs {
		if eq(x, rr) {
			return true
		}
	}
	return false
}

// loadRR adds rr to the RRs of one name as a zone file load does, like NSD:
// a duplicate keeps the first copy and its TTL, differing TTLs in an RRset
// stay as written, and a singleton type keeps the last RR.
func loadRR(rrs []dns.RR, rr dns.RR) []dns.RR {
	t := rr.Header().Rrtype
	for i, old := range rrs {
		if old.Header().Rrtype != t {
			continue
		}
		if zonerules.Singleton(t) {
			rrs[i] = rr
			return rrs
		}
		if dns.IsDuplicate(old, rr) {
			return rrs
		}
	}
	return append(rrs, rr)
}

func removeRRs(rrs []dns.RR, drop func(dns.RR) bool) []dns.RR {
	out := make([]dns.RR, 0, len(rrs))
	for _, rr := range rrs {
		if !drop(rr) {
			out = append(out, rr)
		}
	}
	return out
}

// addRR adds rr to the RRs of one name, as a change does. A duplicate (RFC
// 2181 §5: equal but for the TTL) is not added twice; the TTL of the added RR
// becomes the TTL of its whole RRset (RFC 2181 §5.2); a singleton type (SOA,
// CNAME, DNAME) is replaced. RRs keep their places, so adding what is there
// already changes nothing.
// addVerbatim returns rrs with rr added as it is, unless a duplicate of
// it is there (dns.IsDuplicate); rr replaces the RR of a type that has
// one only (the SOA, a CNAME, a DNAME).
func addVerbatim(rrs []dns.RR, rr dns.RR) []dns.RR {
	t := rr.Header().Rrtype
	if zonerules.Singleton(t) {
		rrs = slices.DeleteFunc(slices.Clone(rrs), func(old dns.RR) bool { return old.Header().Rrtype == t })
	} else if slices.ContainsFunc(rrs, func(old dns.RR) bool { return dns.IsDuplicate(old, rr) }) {
		return rrs
	}
	return append(slices.Clip(rrs), rr)
}

func addRR(rrs []dns.RR, rr dns.RR) []dns.RR {
	t, ttl := rr.Header().Rrtype, rr.Header().Ttl
	out := make([]dns.RR, 0, len(rrs)+1)
	found := false
	for _, old := range rrs {
		if old.Header().Rrtype != t {
			out = append(out, old)
			continue
		}
		switch {
		case zonerules.Singleton(t):
			if found {
				continue
			}
			old, found = rr, true
		case dns.IsDuplicate(old, rr):
			found = true
		}
		if old.Header().Ttl != ttl {
			old = dns.Copy(old)
			old.Header().Ttl = ttl
		}
		out = append(out, old)
	}
	if !found {
		out = append(out, rr)
	}
	return out
}

// checkName enforces zonerules.CheckName on the RRs of one name a change
// touched.
func checkName(name string, rrs []dns.RR) error {
	return conflict(zonerules.CheckName(name, rrs))
}

// conflict is a zone rule's refusal as the state machine's: ErrConflict.
func conflict(err error) error {
	if err == nil {
		return nil
	}
	return Errorf(ErrConflict, "%v", err)
}

// checkDNAMEs enforces RFC 6672 section 2.3 on the names a change touched
// (names holds their new RRs, zb the rest of zone): no name with data below
// a DNAME owner, so neither data added below one nor a DNAME added above
// data.
func checkDNAMEs(zb *bolt.Bucket, zone string, names map[string][]dns.RR, order []string) error {
	isDNAME := func(n string) bool {
		rrs, ok := names[n]
		if !ok {
			var err error
			if rrs, err = RRsAt(zb, n); err != nil {
				return false
			}
		}
		return hasType(rrs, dns.TypeDNAME)
	}
	for _, name := range order {
		rrs := names[name]
		if len(rrs) == 0 {
			continue
		}
		if owner := zonerules.DNAMEAbove(name, zone, isDNAME); owner != "" {
			return conflict(zonerules.BelowDNAME(name, owner))
		}
		if !hasType(rrs, dns.TypeDNAME) {
			continue
		}
		if err := zonerules.CheckDNAME(zone, name, rrs); err != nil {
			return conflict(err)
		}
		// The names below it follow its key (canonical order).
		prefix := nameKey(name)
		cur := zb.Cursor()
		for k, v := cur.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = cur.Next() {
			if len(k) == len(prefix) {
				continue
			}
			below, err := DecodeRRs(v)
			if err != nil || len(below) == 0 {
				continue
			}
			owner := strings.ToLower(dns.Fqdn(below[0].Header().Name))
			if now, touched := names[owner]; touched && len(now) == 0 {
				continue // deleted by the same change
			}
			return Errorf(ErrConflict, "a DNAME at %q, which has names below it such as %q (RFC 6672 section 2.3)", name, owner)
		}
	}
	return nil
}

// checkApex enforces zonerules.CheckApex on the apex after a change.
func checkApex(origin string, apex []dns.RR) error {
	return conflict(zonerules.CheckApex(origin, apex))
}

// bumpSerial returns apex with its SOA serial set to old+1, or to the
// serial of an added SOA when that one is newer than old (RFC 1982 serial
// number arithmetic), and the new serial. The SOA and the slice are copies:
// apex itself, which may be the apex as stored (a write's before-image),
// does not change.
func bumpSerial(apex []dns.RR, old uint32, added *dns.SOA) ([]dns.RR, uint32) {
	serial := old + 1
	if added != nil && zonerules.SerialAfter(added.Serial, old) {
		serial = added.Serial
	}
	out := slices.Clone(apex)
	for i, rr := range out {
		if soa, ok := rr.(*dns.SOA); ok {
			cp := dns.Copy(soa).(*dns.SOA)
			cp.Serial = serial
			out[i] = cp
		}
	}
	return out, serial
}

// soaSerial returns the serial of the SOA among rrs, and whether there is one.
func soaSerial(rrs []dns.RR) (uint32, bool) {
	for _, rr := range rrs {
		if soa, ok := rr.(*dns.SOA); ok {
			return soa.Serial, true
		}
	}
	return 0, false
}
