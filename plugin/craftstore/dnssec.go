package craftstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/craftdns/craftdns/internal/dnssec"
	"github.com/craftdns/craftdns/internal/httpapi"
	"github.com/craftdns/craftdns/internal/shardproto"
	"github.com/craftdns/craftdns/internal/txn"
	"github.com/craftdns/craftdns/internal/zoneapi"
	"github.com/craftdns/craftdns/plugin/craftstore/replica"
	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"
	"github.com/craftdns/craftdns/plugin/craftstore/zone"

	"github.com/miekg/dns"
)

// signing is a member's online signing: its configuration, the zones' keys
// as last opened, and the signature cache.
type signing struct {
	cfg    dnssec.Config
	signer *dnssec.Signer
	keys   sync.Map // zone → *openedKeys
	// warned: zones whose keys could not be opened, said once.
	warned sync.Map
}

// openedKeys are a zone's keys opened at a replica's KeysVersion.
type openedKeys struct {
	version uint64
	keys    *dnssec.Keys // nil: the zone has none (yet)
}

// signatureCache is how many signatures a member keeps (about 100 bytes
// each with their keys).
const signatureCache = 100000

func newSigning(cfg dnssec.Config, member uint64) *signing {
	if !cfg.On {
		return nil
	}
	s := &signing{cfg: cfg, signer: dnssec.NewSigner(signatureCache)}
	id := strconv.FormatUint(member, 10)
	hit, miss := signaturesCount.WithLabelValues(id, "hit"), signaturesCount.WithLabelValues(id, "miss")
	s.signer.Counted = func(h bool) {
		if h {
			hit.Inc()
		} else {
			miss.Inc()
		}
	}
	return s
}

// keysFor returns zone's keys, opened with the key-encryption key; nil when
// the zone has none yet or they do not open (logged once).
func (s *signing) keysFor(rep *replica.Replica, zone string) *dnssec.Keys {
	v := rep.KeysVersion()
	if o, ok := s.keys.Load(zone); ok && o.(*openedKeys).version == v {
		return o.(*openedKeys).keys
	}
	raw, err := rep.ZoneKeys(zone)
	var keys *dnssec.Keys
	if err == nil && raw != nil {
		keys, err = dnssec.OpenKeySet(zone, raw, s.cfg.KEK)
	}
	if err != nil {
		if _, said := s.warned.LoadOrStore(zone, true); !said {
			log.Errorf("zone %s: its DNSSEC keys: %v; its answers go unsigned", zone, err)
		}
		keys = nil
	} else {
		s.warned.Delete(zone)
	}
	s.keys.Store(zone, &openedKeys{version: v, keys: keys})
	return keys
}

// rollKeys takes the rollover steps that are due, on the leader.
func (m *member) rollKeys() {
	for _, z := range m.rep.Zones() {
		if !m.sec.cfg.Signs(z) {
			continue
		}
		raw, err := m.rep.ZoneKeys(z)
		if err != nil || raw == nil {
			continue
		}
		step, kind, err := m.sec.cfg.Step(z, raw, time.Now())
		if err != nil {
			log.Warningf("zone %s: its %s rollover: %v", z, kind, err)
			continue
		}
		if step == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = m.rep.SetKeys(ctx, z, step, false)
		cancel()
		switch {
		case err == nil:
			log.Infof("zone %s: %s rollover: %s", z, kind, dnssec.DescribeKeys(step))
		case errors.Is(err, fsm.ErrConflict): // another leader's step went first
		default:
			log.Warningf("zone %s: committing a %s rollover step: %v; tried again", z, kind, err)
		}
	}
}

// makeKeys gives every signed zone of the member's group that has no keys
// its first ones: on the leader, once every member of the group applies
// OpKeys (fsm version 3). The keys are made here and committed through
// Raft, so that every member signs with them; of two leaders that make a
// zone's keys at once, the first committed wins (Absent).
func (m *member) makeKeys(cfg config) {
	if m.sec == nil || !m.rep.IsLeader() {
		return
	}
	if m.rep.Placement() != nil {
		// A zone of a sharded deployment has one key set on every shard
		// of it, which its routers make and roll (craftroute's
		// dnssec.go): a member's leader makes no keys of its own.
		return
	}
	var missing []string
	for _, z := range m.rep.Zones() {
		if !m.sec.cfg.Signs(z) {
			continue
		}
		if raw, err := m.rep.ZoneKeys(z); err == nil && raw == nil {
			missing = append(missing, z)
		}
	}
	if len(missing) == 0 {
		m.rollKeys()
		return
	}
	if !m.versionsOK {
		if err := groupVersions(m.rep, cfg.token, fsm.Version); err != nil {
			if m.versionErr != err.Error() {
				log.Warningf("member %d: not making DNSSEC keys yet: %v", m.rep.ID(), err)
				m.versionErr = err.Error()
			}
			return
		}
		m.versionsOK = true
	}
	for _, z := range missing {
		set, err := m.sec.cfg.NewKeySet(z, time.Now())
		if err != nil {
			log.Errorf("zone %s: making its DNSSEC keys: %v", z, err)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = m.rep.SetKeys(ctx, z, set, true)
		cancel()
		switch {
		case err == nil:
			log.Infof("zone %s: DNSSEC keys made (algorithm %d)", z, m.sec.cfg.Algorithm)
		case errors.Is(err, fsm.ErrConflict): // another leader's won
		default:
			log.Warningf("zone %s: committing its DNSSEC keys: %v; tried again", z, err)
		}
	}
}

// groupVersions checks that every member of rep's group applies the state
// machine's version want or later, by asking each member's API for its
// status (GET /v1/cluster).
func groupVersions(rep *replica.Replica, token string, want int) error {
	st, err := rep.Status()
	if err != nil {
		return err
	}
	cl := &http.Client{Timeout: 2 * time.Second}
	for _, mb := range st.Members {
		if mb.ID == rep.ID() {
			continue
		}
		if mb.API == "" {
			return fmt.Errorf("member %d has no API address to ask its version of", mb.ID)
		}
		// The API address a member advertises is its listener's (HTTP).
		req, err := http.NewRequest(http.MethodGet, "http://"+mb.API+"/v1/cluster", nil)
		if err != nil {
			return err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := cl.Do(req)
		if err != nil {
			return fmt.Errorf("member %d: %v", mb.ID, err)
		}
		var s replica.Status
		err = json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 1<<20)).Decode(&s)
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("member %d: its status: %v", mb.ID, err)
		}
		if s.FSMVersion < want {
			return fmt.Errorf("member %d runs state machine version %d, signing needs %d: upgrade it", mb.ID, s.FSMVersion, want)
		}
	}
	return nil
}

// signedAnswer answers r, a query for qname in signed zone z whose keys
// are keys: the apex's DNSKEY, CDS and CDNSKEY from the keys, anything else
// from the lookup; signed when r has DO set. It returns nil when it cannot
// sign (the caller answers unsigned).
func (c *Craftstore) signedAnswer(s *signing, keys *dnssec.Keys, r *dns.Msg, z *zone.Zone, qname string, m *dns.Msg) *dns.Msg {
	q := r.Question[0]
	if qname == z.Origin() {
		if km := keys.KeysReply(r); km != nil {
			m = km
		}
	}
	if opt := r.IsEdns0(); opt == nil || !opt.Do() {
		return m
	}
	if err := z.Complete(m, func() []uint16 { return zone.KeyTypes(len(keys.DS) > 0) }); err != nil {
		log.Errorf("zone %s: completing the answer to %s %s: %v", z.Origin(), q.Name, dns.TypeToString[q.Qtype], err)
		return nil
	}
	if err := s.signer.SignSections(m, keys, time.Now(), z.Glue); err != nil {
		log.Errorf("zone %s: signing the answer to %s %s: %v", z.Origin(), q.Name, dns.TypeToString[q.Qtype], err)
		return nil
	}
	return m
}

// signedQuery reports whether r's answer in a signed zone differs from the
// unsigned one: DO set, or a query for the apex's keys.
func signedQuery(r *dns.Msg, qname, origin string) bool {
	if opt := r.IsEdns0(); opt != nil && opt.Do() {
		return true
	}
	switch r.Question[0].Qtype {
	case dns.TypeDNSKEY, dns.TypeCDS, dns.TypeCDNSKEY:
		return qname == origin
	}
	return false
}

// zoneDS serves GET /v1/zones/{zone}/ds: 404 for a zone the member does
// not hold or does not sign, 503 while its keys are not made yet.
func (a *apiServer) zoneDS(w http.ResponseWriter, r *http.Request) {
	origin, err := zoneapi.ZoneParam(r)
	if err != nil {
		fail(w, err)
		return
	}
	switch {
	case a.rep.Zone(origin) == nil:
		fail(w, zoneapi.Errorf(http.StatusNotFound, "zone %q not found", origin))
		return
	case a.sec == nil || !a.sec.cfg.Signs(origin):
		fail(w, zoneapi.Errorf(http.StatusNotFound, "zone %q is not signed: no dnssec line names it", origin))
		return
	}
	keys := a.sec.keysFor(a.rep, origin)
	if keys == nil {
		fail(w, zoneapi.Errorf(http.StatusServiceUnavailable, "zone %q has no DNSSEC keys yet (the group's leader makes them): try again", origin))
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, keys.Info())
}

// zoneKeys serves GET /v1/zones/{zone}/keys: the zone's key set as the
// member holds it, its private keys sealed (null when it has none), for
// the routers of a sharded deployment, which make, roll and sign with a
// zone's keys (craftroute's dnssec.go). 404 for a zone the member does not
// hold. The API's token guards it, as every path.
func (a *apiServer) zoneKeys(w http.ResponseWriter, r *http.Request) {
	origin, err := zoneapi.ZoneParam(r)
	if err != nil {
		fail(w, err)
		return
	}
	if a.rep.Zone(origin) == nil {
		fail(w, zoneapi.Errorf(http.StatusNotFound, "zone %q not found", origin))
		return
	}
	raw, err := a.rep.ZoneKeys(origin)
	if err != nil {
		fail(w, err)
		return
	}
	v := txn.ZoneKeys{Zone: origin, Set: raw}
	if raw != nil {
		v.Hash = dnssec.SetHash(raw)
	}
	httpapi.WriteJSON(w, http.StatusOK, v)
}

// completeForRouter adds to m, zone z's answer to a router that signs
// it (shardproto.SignedRequested), what a signed answer carries besides
// the signatures and only the member can tell: the DS of a referral's
// cut, RFC 9824's NSEC of a negative answer (the types at the name, the
// apex's keys' among them), the NSEC of an insecure referral; and, in the
// answer's option, the owner names at or below a zone cut, whose records
// are glue and not signed. The member needs no keys for it.
func completeForRouter(rep *replica.Replica, m *dns.Msg, z *zone.Zone) {
	if err := z.Complete(m, func() []uint16 { return apexKeyTypes(rep, z.Origin()) }); err != nil {
		// No option: the router answers SERVFAIL rather than a denial
		// it cannot prove.
		log.Errorf("zone %s: completing the answer to %s for signing: %v", z.Origin(), m.Question[0].Name, err)
		return
	}
	shardproto.AttachGlue(m, z.GlueNames(m))
}

// apexKeyTypes are the types the apex of zone holds besides its data when
// it has keys: DNSKEY, and CDS and CDNSKEY while a key is for the DS. Read
// from the stored set, which needs no key-encryption key.
func apexKeyTypes(rep *replica.Replica, origin string) []uint16 {
	raw, err := rep.ZoneKeys(origin)
	if err != nil || raw == nil {
		return nil
	}
	ks, err := dnssec.ParseKeySet(raw)
	if err != nil {
		return nil
	}
	return zone.KeyTypes(slices.ContainsFunc(ks.Keys, func(k dnssec.SealedKey) bool { return k.DS }))
}
