package craftstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/dnssec"
	"github.com/craftdns/craftdns/internal/httpapi"
	"github.com/craftdns/craftdns/internal/zoneapi"
	"github.com/craftdns/craftdns/plugin/craftstore/replica"
	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"
	"github.com/craftdns/craftdns/plugin/craftstore/zone"

	"github.com/miekg/dns"
)

// dnssecConfig is the block's online signing (README, "DNSSEC"): the
// dnssec, dnssec_kek, dnssec_algorithm and dnssec_keys lines.
type dnssecConfig struct {
	on      bool
	zones   []string // canonical; nil: every zone the member serves
	kekFile string
	kek     *dnssec.KEK
	alg     uint8
	csk     bool // one combined key (flags 257) instead of a KSK and a ZSK
	// zskLifetime is how long a zone-signing key signs before the next
	// replaces it (dnssec_zsk_rollover); 0: never. rolloverWait is each
	// of a rollover's waits: the new key published before it signs, the
	// old one published after it stopped (at least the DNSKEY TTL and the
	// zone's largest TTL, so that no cache holds a signature whose key
	// it cannot find).
	zskLifetime  time.Duration
	rolloverWait time.Duration
	zskSet       bool // dnssec_zsk_rollover given
	// kskLifetime is how long a key-signing key serves before the next
	// replaces it (dnssec_ksk_rollover); 0: never. parents are the parent
	// zone's servers, asked for the zone's DS: the old KSK goes once they
	// list only the new one's (the registry acted on the CDS).
	kskLifetime time.Duration
	parents     []string
}

// Rollover defaults: a ZSK signs for 30 days; each wait is a day (above
// the DNSKEY TTL, an hour, and most zones' largest TTL).
const (
	defaultZSKLifetime  = 30 * 24 * time.Hour
	defaultRolloverWait = 24 * time.Hour
)

// signs reports whether zone is signed.
func (d *dnssecConfig) signs(zone string) bool {
	return d.on && (d.zones == nil || slices.Contains(d.zones, zone))
}

// check finishes the configuration once the block is read: a signed zone
// needs the key-encryption key, which must load (a missing or bad file
// fails the start, naming it).
func (d *dnssecConfig) check() error {
	if !d.on {
		if d.kekFile != "" || d.alg != 0 || d.csk || d.zskSet || d.kskLifetime != 0 {
			return errors.New("dnssec_kek, dnssec_algorithm, dnssec_keys, dnssec_zsk_rollover and dnssec_ksk_rollover need a dnssec line")
		}
		return nil
	}
	if d.kekFile == "" {
		return errors.New("dnssec needs dnssec_kek FILE: the key-encryption key the members seal the zones' private keys with (head -c 32 /dev/urandom | base64 > FILE; chmod 600 FILE; the same file on every member)")
	}
	if d.alg == 0 {
		d.alg = dnssec.ECDSAP256SHA256
	}
	if !d.zskSet {
		d.zskLifetime, d.rolloverWait = defaultZSKLifetime, defaultRolloverWait
	}
	if d.kskLifetime > 0 && len(d.parents) == 0 {
		return errors.New("dnssec_ksk_rollover needs the parent zone's servers, to see its DS change")
	}
	if d.zskLifetime > 0 && 2*d.rolloverWait >= d.zskLifetime {
		return fmt.Errorf("dnssec_zsk_rollover: the lifetime %v must be more than twice the wait %v", d.zskLifetime, d.rolloverWait)
	}
	var err error
	d.kek, err = dnssec.LoadKEK(d.kekFile)
	return err
}

// signing is a member's online signing: its configuration, the zones' keys
// as last opened, and the signature cache.
type signing struct {
	cfg    dnssecConfig
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

func newSigning(cfg dnssecConfig, member uint64) *signing {
	if !cfg.on {
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
		keys, err = openKeySet(zone, raw, s.cfg.kek)
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

// keyTTL is the TTL of the DNSKEY, CDS and CDNSKEY RRsets.
const keyTTL = 3600

// sealAD binds a sealed private key to its zone and key.
func sealAD(zone string, flags uint16, alg uint8, tag uint16) []byte {
	return fmt.Appendf(nil, "%s %d %d %d", zone, flags, alg, tag)
}

// openKeySet opens the key set raw of zone with kek.
func openKeySet(zone string, raw []byte, kek *dnssec.KEK) (*dnssec.Keys, error) {
	ks, err := fsm.ParseKeySet(raw)
	if err != nil {
		return nil, err
	}
	keys := &dnssec.Keys{Zone: zone, TTL: keyTTL}
	for _, sk := range ks.Keys {
		priv, err := kek.Open(sk.Sealed, sealAD(zone, sk.Flags, sk.Algorithm, sk.Tag))
		if err != nil {
			return nil, fmt.Errorf("key %d: %w", sk.Tag, err)
		}
		k, err := dnssec.ParseKey(zone, sk.Algorithm, sk.Flags, priv)
		if err != nil {
			return nil, fmt.Errorf("key %d: %w", sk.Tag, err)
		}
		if k.Tag != sk.Tag {
			return nil, fmt.Errorf("key %d: its private key has the tag %d", sk.Tag, k.Tag)
		}
		if sk.State == fsm.KeyActive {
			keys.Signing = append(keys.Signing, k)
		} else { // published before it signs, or retired after
			keys.Published = append(keys.Published, k)
		}
		if sk.DS {
			keys.DS = append(keys.DS, k)
		}
	}
	return keys, nil
}

// newKeySet makes zone's first keys: a key-signing and a zone-signing key,
// or one combined key, sealed with kek.
func newKeySet(zone string, cfg dnssecConfig, now time.Time) ([]byte, error) {
	flags := []uint16{dnssec.FlagKSK, dnssec.FlagZSK}
	if cfg.csk {
		flags = flags[:1]
	}
	var ks fsm.KeySet
	for _, f := range flags {
		k, err := dnssec.GenerateKey(zone, cfg.alg, f)
		if err != nil {
			return nil, err
		}
		der, err := k.MarshalPrivate()
		if err != nil {
			return nil, err
		}
		ks.Keys = append(ks.Keys, fsm.SealedKey{
			Tag: k.Tag, Algorithm: cfg.alg, Flags: f, State: fsm.KeyActive, DS: f == dnssec.FlagKSK,
			Sealed: cfg.kek.Seal(der, sealAD(zone, f, cfg.alg, k.Tag)), Created: now.Unix(), Since: now.Unix(),
		})
	}
	return json.Marshal(ks)
}

// since is when key k entered its state.
func since(k fsm.SealedKey) time.Time {
	if k.Since != 0 {
		return time.Unix(k.Since, 0)
	}
	return time.Unix(k.Created, 0)
}

// rolloverStep returns the key set that follows raw, zone's, at now in a
// pre-publication ZSK rollover (RFC 6781 section 4.1.1.1), or nil when
// nothing is due:
//
//  1. the active ZSK has signed for the lifetime: a new ZSK is published;
//  2. it has been published for the wait: it signs, the old one retires
//     (still published);
//  3. the retired one has been published for the wait since: it goes.
//
// A combined key (CSK) does not roll over here. The step carries the hash
// of raw: it applies over raw only.
func rolloverStep(zone string, raw []byte, cfg dnssecConfig, now time.Time) ([]byte, error) {
	ks, err := fsm.ParseKeySet(raw)
	if err != nil {
		return nil, err
	}
	if cfg.zskLifetime <= 0 {
		return nil, nil
	}
	var active, published, retired []int
	for i, k := range ks.Keys {
		if k.Flags != dnssec.FlagZSK {
			continue
		}
		switch k.State {
		case fsm.KeyActive:
			active = append(active, i)
		case fsm.KeyPublished:
			published = append(published, i)
		case fsm.KeyRetired:
			retired = append(retired, i)
		}
	}
	if len(active) == 0 {
		return nil, nil // a CSK zone
	}
	next := fsm.KeySet{Prev: fsm.SetHash(raw)}
	switch {
	case len(retired) > 0 && !now.Before(since(ks.Keys[retired[0]]).Add(cfg.rolloverWait)):
		for i, k := range ks.Keys {
			if i != retired[0] {
				next.Keys = append(next.Keys, k)
			}
		}
	case len(published) > 0 && !now.Before(since(ks.Keys[published[0]]).Add(cfg.rolloverWait)):
		for i, k := range ks.Keys {
			switch {
			case i == published[0]:
				k.State, k.Since = fsm.KeyActive, now.Unix()
			case k.Flags == dnssec.FlagZSK && k.State == fsm.KeyActive:
				k.State, k.Since = fsm.KeyRetired, now.Unix()
			}
			next.Keys = append(next.Keys, k)
		}
	case len(published) == 0 && len(retired) == 0 && !now.Before(since(ks.Keys[active[0]]).Add(cfg.zskLifetime)):
		k, err := dnssec.GenerateKey(zone, ks.Keys[active[0]].Algorithm, dnssec.FlagZSK)
		if err != nil {
			return nil, err
		}
		der, err := k.MarshalPrivate()
		if err != nil {
			return nil, err
		}
		alg := k.DNSKEY.Algorithm
		next.Keys = append(ks.Keys, fsm.SealedKey{Tag: k.Tag, Algorithm: alg, Flags: dnssec.FlagZSK, State: fsm.KeyPublished,
			Sealed: cfg.kek.Seal(der, sealAD(zone, dnssec.FlagZSK, alg, k.Tag)), Created: now.Unix(), Since: now.Unix()})
	default:
		return nil, nil
	}
	return json.Marshal(next)
}

// kskStep returns the key set that follows raw, zone's, at now in a
// KSK rollover driven by CDS (RFC 7344; the double-signature rollover of
// RFC 6781 section 4.1.2), or nil when nothing is due. parentDS asks the
// parent zone's servers for the zone's DS RRset.
//
//  1. the KSK has served for its lifetime: a new one is made; both sign
//     the DNSKEY RRset, and CDS and CDNSKEY list only the new one, which
//     asks the parent (its registry's CDS scanner) to change the DS;
//  2. the parent's servers list the new key's DS and not the old one's:
//     the old KSK is retired (published, not signing);
//  3. after the wait it goes.
func kskStep(zone string, raw []byte, cfg dnssecConfig, now time.Time, parentDS func() ([]*dns.DS, error)) ([]byte, error) {
	if cfg.kskLifetime <= 0 {
		return nil, nil
	}
	ks, err := fsm.ParseKeySet(raw)
	if err != nil {
		return nil, err
	}
	var listed, leaving, retired []int // active KSKs the DS lists, and not; retired KSKs
	for i, k := range ks.Keys {
		if k.Flags != dnssec.FlagKSK {
			continue
		}
		switch {
		case k.State == fsm.KeyRetired:
			retired = append(retired, i)
		case k.State == fsm.KeyActive && k.DS:
			listed = append(listed, i)
		case k.State == fsm.KeyActive:
			leaving = append(leaving, i)
		}
	}
	if len(listed) == 0 {
		return nil, nil
	}
	next := fsm.KeySet{Prev: fsm.SetHash(raw)}
	switch {
	case len(retired) > 0:
		if now.Before(since(ks.Keys[retired[0]]).Add(cfg.rolloverWait)) {
			return nil, nil
		}
		for i, k := range ks.Keys {
			if i != retired[0] {
				next.Keys = append(next.Keys, k)
			}
		}
	case len(leaving) > 0:
		ds, err := parentDS()
		if err != nil {
			return nil, err
		}
		if !parentLists(zone, ds, ks.Keys, listed, leaving) {
			return nil, nil
		}
		for i, k := range ks.Keys {
			if i == leaving[0] {
				k.State, k.Since = fsm.KeyRetired, now.Unix()
			}
			next.Keys = append(next.Keys, k)
		}
	case !now.Before(since(ks.Keys[listed[0]]).Add(cfg.kskLifetime)):
		alg := ks.Keys[listed[0]].Algorithm
		k, err := dnssec.GenerateKey(zone, alg, dnssec.FlagKSK)
		if err != nil {
			return nil, err
		}
		der, err := k.MarshalPrivate()
		if err != nil {
			return nil, err
		}
		for i, old := range ks.Keys {
			if i == listed[0] {
				old.DS, old.Since = false, now.Unix()
			}
			next.Keys = append(next.Keys, old)
		}
		next.Keys = append(next.Keys, fsm.SealedKey{Tag: k.Tag, Algorithm: alg, Flags: dnssec.FlagKSK, State: fsm.KeyActive, DS: true,
			Sealed: cfg.kek.Seal(der, sealAD(zone, dnssec.FlagKSK, alg, k.Tag)), Created: now.Unix(), Since: now.Unix()})
	default:
		return nil, nil
	}
	return json.Marshal(next)
}

// parentLists reports whether the parent's DS RRset ds lists the keys
// listed (by tag and algorithm) and none of the keys leaving.
func parentLists(zone string, ds []*dns.DS, keys []fsm.SealedKey, listed, leaving []int) bool {
	has := func(k fsm.SealedKey) bool {
		for _, d := range ds {
			if d.KeyTag == k.Tag && d.Algorithm == k.Algorithm && dns.CanonicalName(d.Hdr.Name) == zone {
				return true
			}
		}
		return false
	}
	for _, i := range listed {
		if !has(keys[i]) {
			return false
		}
	}
	for _, i := range leaving {
		if has(keys[i]) {
			return false
		}
	}
	return true
}

// askParents asks each of servers (host:port) for zone's DS RRset, and
// returns it when they all give the same one.
func askParents(zone string, servers []string) ([]*dns.DS, error) {
	var first []*dns.DS
	for i, srv := range servers {
		q := new(dns.Msg)
		q.SetQuestion(zone, dns.TypeDS)
		q.RecursionDesired = false
		c := &dns.Client{Timeout: 2 * time.Second}
		r, _, err := c.Exchange(q, srv)
		if err != nil {
			return nil, fmt.Errorf("parent %s: %w", srv, err)
		}
		var ds []*dns.DS
		for _, rr := range r.Answer {
			if d, ok := rr.(*dns.DS); ok {
				ds = append(ds, d)
			}
		}
		if i == 0 {
			first = ds
		} else if len(ds) != len(first) {
			return nil, nil // not every server has the change yet
		}
	}
	return first, nil
}

// rollKeys takes the rollover steps that are due, on the leader.
func (m *member) rollKeys() {
	for _, z := range m.rep.Zones() {
		if !m.sec.cfg.signs(z) {
			continue
		}
		raw, err := m.rep.ZoneKeys(z)
		if err != nil || raw == nil {
			continue
		}
		now := time.Now()
		step, err := rolloverStep(z, raw, m.sec.cfg, now)
		if err != nil {
			log.Errorf("zone %s: its ZSK rollover: %v", z, err)
			continue
		}
		kind := "ZSK"
		if step == nil {
			kind = "KSK"
			step, err = kskStep(z, raw, m.sec.cfg, now, func() ([]*dns.DS, error) { return askParents(z, m.sec.cfg.parents) })
			if err != nil {
				log.Warningf("zone %s: its KSK rollover: %v", z, err)
				continue
			}
		}
		if step == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = m.rep.SetKeys(ctx, z, step, false)
		cancel()
		switch {
		case err == nil:
			log.Infof("zone %s: %s rollover: %s", z, kind, describeKeys(step))
		case errors.Is(err, fsm.ErrConflict): // another leader's step went first
		default:
			log.Warningf("zone %s: committing a %s rollover step: %v; tried again", z, kind, err)
		}
	}
}

// describeKeys says a key set's keys and states, for the log.
func describeKeys(raw []byte) string {
	ks, err := fsm.ParseKeySet(raw)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, k := range ks.Keys {
		kind := "ZSK"
		if k.Flags == dnssec.FlagKSK {
			kind = "KSK"
		}
		out = append(out, fmt.Sprintf("%s %d %s", kind, k.Tag, k.State))
	}
	return strings.Join(out, ", ")
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
		// A zone of a sharded deployment must have one key set on every
		// shard: its routers would have to agree on it, which they do
		// not yet. Said once.
		if !m.shardedSaid {
			log.Warningf("member %d: DNSSEC signing is not available for the zones of a sharded deployment (a shard map is set); they are served unsigned", m.rep.ID())
			m.shardedSaid = true
		}
		return
	}
	var missing []string
	for _, z := range m.rep.Zones() {
		if !m.sec.cfg.signs(z) {
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
		set, err := newKeySet(z, m.sec.cfg, time.Now())
		if err != nil {
			log.Errorf("zone %s: making its DNSSEC keys: %v", z, err)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = m.rep.SetKeys(ctx, z, set, true)
		cancel()
		switch {
		case err == nil:
			log.Infof("zone %s: DNSSEC keys made (algorithm %d)", z, m.sec.cfg.alg)
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

// keyRRsets are the apex RRsets signing adds to a zone: its keys, and what
// it asks of its parent.
func keyRRset(keys *dnssec.Keys, qtype uint16) []dns.RR {
	switch qtype {
	case dns.TypeDNSKEY:
		return keys.DNSKEYs()
	case dns.TypeCDS:
		return keys.CDS()
	case dns.TypeCDNSKEY:
		return keys.CDNSKEY()
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
		if rrs := keyRRset(keys, q.Qtype); rrs != nil {
			m = new(dns.Msg)
			m.SetReply(r)
			m.Authoritative = true
			if opt := r.IsEdns0(); opt != nil {
				m.SetEdns0(dns.DefaultMsgSize, opt.Do())
			}
			m.Answer = rrs
		}
	}
	if opt := r.IsEdns0(); opt == nil || !opt.Do() {
		return m
	}
	a := dnssec.Answer{Glue: z.Glue}
	addDS(m, z)
	if name, neg := dnssec.Denied(m); neg {
		name = dnsname.Lower(name)
		exists, types, _ := z.Presence(name)
		if name == z.Origin() {
			types = append(types, dns.TypeDNSKEY)
			if len(keys.DS) > 0 {
				types = append(types, dns.TypeCDS, dns.TypeCDNSKEY)
			}
		}
		a.Negative = &dnssec.Denial{Name: name, Exists: exists, Types: types}
	}
	if err := s.signer.SignAnswer(m, keys, time.Now(), a); err != nil {
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

// dsView is GET /v1/zones/{zone}/ds: what the parent zone needs of a
// signed zone.
type dsView struct {
	Zone   string   `json:"zone"`
	DS     []string `json:"ds"`     // the DS records to give the parent (SHA-256)
	DNSKEY []string `json:"dnskey"` // the zone's DNSKEY RRset
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
	case a.sec == nil || !a.sec.cfg.signs(origin):
		fail(w, zoneapi.Errorf(http.StatusNotFound, "zone %q is not signed: no dnssec line names it", origin))
		return
	}
	keys := a.sec.keysFor(a.rep, origin)
	if keys == nil {
		fail(w, zoneapi.Errorf(http.StatusServiceUnavailable, "zone %q has no DNSSEC keys yet (the group's leader makes them): try again", origin))
		return
	}
	v := dsView{Zone: origin, DS: []string{}, DNSKEY: []string{}}
	for _, k := range keys.DS {
		v.DS = append(v.DS, k.DS(keyTTL).String())
	}
	for _, rr := range keys.DNSKEYs() {
		v.DNSKEY = append(v.DNSKEY, rr.String())
	}
	httpapi.WriteJSON(w, http.StatusOK, v)
}

// addDS adds to m, when it is (or ends in) a referral, the DS RRset of its cut, which a
// signed referral carries (RFC 4035 section 3.1.4): the delegation is then
// secure; without one SignAnswer proves it insecure.
func addDS(m *dns.Msg, z *zone.Zone) {
	cut := dnssec.ReferralCut(m, z.Origin())
	if cut == "" {
		return
	}
	for _, rr := range m.Ns {
		if rr.Header().Rrtype == dns.TypeDS {
			return
		}
	}
	if ds := z.RRs(cut, dns.TypeDS); ds != nil {
		m.Ns = append(m.Ns, ds...)
	}
}
