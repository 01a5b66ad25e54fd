// Package craftroute is a CoreDNS plugin in front of craftstore shards: it
// maps every query name (key mode "name") or zone (key mode "zone") to a
// shard with a consistent-hash ring, sends the query to the shard member
// most recently seen alive, fails over to the next member on timeout or
// error, and, in key mode "name", merges the facts of every shard when the
// owner shard cannot answer alone (package partition), so that the answer
// equals that of one unsharded server.
package craftroute

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/coredns/coredns/plugin"
	clog "github.com/coredns/coredns/plugin/pkg/log"

	"github.com/craftdns/craftdns/internal/partition"

	"github.com/miekg/dns"
)

var log = clog.NewWithPlugin("craftroute")

// Key modes.
const (
	keyName = "name" // the canonical query (owner) name: names of a zone spread over shards
	keyZone = "zone" // the longest known zone containing the name: a zone on one shard
)

// config is what a craftroute block says.
type config struct {
	shards     []*Shard          // in Corefile order
	key        string            // keyName or keyZone
	timeout    time.Duration     // one try at one member
	downFor    time.Duration     // how long a failed member is not preferred
	probe      time.Duration     // probe interval for members marked down; 0: no probes
	partitions int               // ring partitions
	load       float64           // ring load factor (bounded loads)
	negCache   int               // entries of the merged-negative cache; 0: off
	keys       map[string]string // TSIG key name (canonical) → base64 secret, to sign forwarded UPDATEs
	keyAlgs    map[string]string // TSIG key name → algorithm (dns.HmacSHA256 ...)
	api        string            // listen address of the HTTP API, "" for none
	token      string            // bearer token for the router's own API
	shardToken string            // bearer token sent to the shards' APIs
	seeds      map[string]string // zone → zone file, imported through the ring when no shard holds it
}

// Craftroute is the plugin handler of one server block.
type Craftroute struct {
	Next  plugin.Handler
	Zones []string // the server block's zones

	cfg   config
	ring  *Ring
	zones *zoneSet
	neg   *negCache
	soa   serials   // key mode name: one serial per zone
	ex    exchanger // tests: in-memory shards

	stopProbes     func()
	stopBackground func()
	// seedsPending counts the seed zones not imported yet (discover.go):
	// the router is not ready before they are served.
	seedsPending atomic.Int32
}

// Name implements plugin.Handler.
func (c *Craftroute) Name() string { return "craftroute" }

// ServeDNS implements plugin.Handler.
func (c *Craftroute) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	if r.Opcode == dns.OpcodeUpdate {
		return c.serveUpdate(ctx, w, r)
	}
	if r.Opcode != dns.OpcodeQuery || len(r.Question) == 0 {
		return plugin.NextOrFailure(c.Name(), c.Next, ctx, w, r)
	}
	if plugin.Zones(c.Zones).Matches(r.Question[0].Name) == "" {
		return plugin.NextOrFailure(c.Name(), c.Next, ctx, w, r)
	}
	var (
		resp *dns.Msg
		err  error
	)
	if len(r.Question) == 1 {
		resp, err = c.resolve(ctx, r)
	} else {
		resp, err = c.resolveEach(ctx, r)
	}
	if err != nil {
		log.Warningf("%s/%s: %v", r.Question[0].Name, dns.TypeToString[r.Question[0].Qtype], err)
		m := new(dns.Msg)
		m.SetRcode(r, dns.RcodeServerFailure)
		if opt := r.IsEdns0(); opt != nil {
			m.SetEdns0(dns.DefaultMsgSize, opt.Do())
			m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_EDE{InfoCode: dns.ExtendedErrorCodeNoReachableAuthority, ExtraText: err.Error()})
		}
		w.WriteMsg(m)
		return dns.RcodeSuccess, nil // written
	}
	w.WriteMsg(resp)
	return dns.RcodeSuccess, nil
}

// resolve answers a single-question query.
func (c *Craftroute) resolve(ctx context.Context, r *dns.Msg) (*dns.Msg, error) {
	q := r.Question[0]
	if q.Qtype == dns.TypeAXFR || q.Qtype == dns.TypeIXFR {
		return refusal(r, dns.ExtendedErrorCodeNotSupported, "zone transfers are served by the shard members, not the router"), nil
	}
	if c.cfg.key == keyZone {
		// The whole zone is on one shard: its answer is final as it is.
		s := c.shardFor(q.Name)
		resp, err := c.exchange(ctx, s, forward(r))
		if err != nil {
			return nil, &errNoShard{s.Name, err}
		}
		resp.Id, resp.Question = r.Id, r.Question
		partition.Strip(resp)
		if r.IsEdns0() == nil {
			resp.Extra = withoutOPT(resp.Extra)
		}
		return resp, nil
	}
	opt := r.IsEdns0()
	edns, do := opt != nil, opt != nil && opt.Do()
	if m := c.neg.get(q.Name, q.Qtype, edns, do); m != nil {
		negCacheHits.Inc()
		m.Id, m.Question = r.Id, r.Question
		c.soa.present(m)
		return m, nil
	}
	resp, broadcast, err := c.resolveName(ctx, r)
	if err != nil {
		return nil, err
	}
	if broadcast {
		if neg := negativeKind(resp); neg != "" {
			negativeMerged.WithLabelValues(neg).Inc()
			c.neg.put(q.Name, q.Qtype, edns, do, resp)
		}
	}
	return resp, nil
}

// resolveEach answers a query of several questions, one by one, each from
// the shard owning it, joined into one response: the sections in question
// order (authority and additional RRs once), the first non-NOERROR rcode. (CoreDNS's own listeners refuse such
// messages with FORMERR before any plugin runs; other servers embedding the
// plugin may pass them.)
func (c *Craftroute) resolveEach(ctx context.Context, r *dns.Msg) (*dns.Msg, error) {
	out := new(dns.Msg)
	out.SetReply(r)
	out.Authoritative = true
	var opt *dns.OPT
	for _, q := range r.Question {
		one := r.Copy()
		one.Question = []dns.Question{q}
		resp, err := c.resolve(ctx, one)
		if err != nil {
			return nil, err
		}
		out.Authoritative = out.Authoritative && resp.Authoritative
		if out.Rcode == dns.RcodeSuccess {
			out.Rcode = resp.Rcode
		}
		out.Answer = append(out.Answer, resp.Answer...)
		out.Ns = append(out.Ns, resp.Ns...)
		for _, rr := range resp.Extra {
			if o, ok := rr.(*dns.OPT); ok {
				if opt == nil {
					opt = o
				}
				continue
			}
			out.Extra = append(out.Extra, rr)
		}
	}
	out.Question = r.Question
	out.Ns, out.Extra = dns.Dedup(out.Ns, nil), dns.Dedup(out.Extra, nil)
	if opt != nil && r.IsEdns0() != nil {
		out.Extra = append(out.Extra, opt)
	}
	return out, nil
}

// negativeKind names a negative answer: "NXDOMAIN", "NODATA" or "".
func negativeKind(m *dns.Msg) string {
	switch {
	case m.Rcode == dns.RcodeNameError:
		return "NXDOMAIN"
	case m.Rcode == dns.RcodeSuccess && len(m.Answer) == 0 && m.Authoritative:
		for _, rr := range m.Ns {
			if rr.Header().Rrtype == dns.TypeSOA {
				return "NODATA"
			}
		}
	}
	return ""
}

// exchange sends req to shard s: the test exchanger when set, else the
// shard's members in order of liveness.
func (c *Craftroute) exchange(ctx context.Context, s *Shard, req *dns.Msg) (*dns.Msg, error) {
	if c.ex != nil {
		return c.ex.exchange(ctx, s, req)
	}
	resp, _, err := s.Exchange(ctx, req, c.cfg.downFor)
	return resp, err
}

// refusal builds a REFUSED answer to r with an Extended DNS Error saying why.
func refusal(r *dns.Msg, code uint16, why string) *dns.Msg {
	m := new(dns.Msg)
	m.SetRcode(r, dns.RcodeRefused)
	if opt := r.IsEdns0(); opt != nil {
		m.SetEdns0(dns.DefaultMsgSize, opt.Do())
		m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_EDE{InfoCode: code, ExtraText: why})
	}
	return m
}

// start brings up the members' connections, the probes, the API and the
// background work (seeding, zone discovery).
func (c *Craftroute) start() error {
	for _, s := range c.cfg.shards {
		for _, m := range s.Members {
			m.start()
		}
	}
	if c.cfg.probe > 0 {
		qname := "."
		if len(c.Zones) > 0 {
			qname = c.Zones[0]
		}
		c.stopProbes = startProbes(c.cfg.shards, c.cfg.probe, c.cfg.downFor, qname)
	}
	if c.cfg.api != "" {
		if err := c.startAPI(); err != nil {
			return err
		}
	}
	c.stopBackground = c.startBackground()
	return nil
}

// stop undoes start.
func (c *Craftroute) stop() error {
	if c.stopBackground != nil {
		c.stopBackground()
	}
	if c.cfg.api != "" {
		c.stopAPI()
	}
	if c.stopProbes != nil {
		c.stopProbes()
	}
	for _, s := range c.cfg.shards {
		for _, m := range s.Members {
			m.stop()
		}
	}
	return nil
}
