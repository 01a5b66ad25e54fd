package craftroute

import (
	"context"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"

	"github.com/craftdns/craftdns/internal/ede"
	"github.com/craftdns/craftdns/internal/shardproto"

	"github.com/miekg/dns"
)

const serveZone = `$ORIGIN example.org.
@ 3600 IN SOA ns1 h 1 7200 3600 1209600 300
@ 3600 IN NS ns1
ns1 IN A 192.0.2.1
www IN A 192.0.2.10
a.b.c IN A 192.0.2.11
*.w IN TXT "wild"
alias IN CNAME www
ext IN CNAME www.example.net.
`

func serve(t *testing.T, c *Craftroute, r *dns.Msg) *dns.Msg {
	t.Helper()
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	if _, err := c.ServeDNS(context.Background(), rec, r); err != nil {
		t.Fatal(err)
	}
	if rec.Msg == nil {
		t.Fatal("nothing written")
	}
	return rec.Msg
}

func TestServeDNS(t *testing.T) {
	c, _ := testRouter(t, "example.org.", serveZone, 3)
	c.neg = newNegCache(100)
	holdLeases(c)

	// A client without EDNS gets no OPT record, from the merge and from the cache.
	for i := range 2 {
		r := new(dns.Msg)
		r.SetQuestion("nothere.example.org.", dns.TypeA)
		m := serve(t, c, r)
		if m.Rcode != dns.RcodeNameError || m.IsEdns0() != nil || m.Id != r.Id {
			t.Fatalf("try %d: %v", i, m)
		}
	}
	if c.neg.len() != 1 {
		t.Fatalf("negative cache holds %d entries, want 1", c.neg.len())
	}
	// An EDNS client with DO gets its OPT, DO set.
	r := new(dns.Msg)
	r.SetQuestion("b.c.example.org.", dns.TypeA) // an empty non-terminal
	r.SetEdns0(1232, true)
	m := serve(t, c, r)
	if m.Rcode != dns.RcodeSuccess || len(m.Answer) != 0 || m.IsEdns0() == nil || !m.IsEdns0().Do() {
		t.Fatalf("ENT: %v", m)
	}
	for _, rr := range m.Extra {
		if o, ok := rr.(*dns.OPT); ok {
			for _, e := range o.Option {
				if e.Option() == 65473 {
					t.Fatal("partition option leaked to the client")
				}
			}
		}
	}

	// A chain leaving the zone, and one crossing shards: one OPT each.
	for _, name := range []string{"ext.example.org.", "alias.example.org."} {
		r = new(dns.Msg)
		r.SetQuestion(name, dns.TypeA)
		r.SetEdns0(1232, false)
		m = serve(t, c, r)
		opts := 0
		for _, rr := range m.Extra {
			if _, ok := rr.(*dns.OPT); ok {
				opts++
			}
		}
		if opts != 1 || len(m.Answer) == 0 {
			t.Fatalf("%s: expected an answer and one OPT record, got %v", name, m)
		}
	}

	// Several questions: split and joined.
	r = new(dns.Msg)
	r.SetQuestion("www.example.org.", dns.TypeA)
	r.Question = append(r.Question, dns.Question{Name: "x.w.example.org.", Qtype: dns.TypeTXT, Qclass: dns.ClassINET},
		dns.Question{Name: "alias.example.org.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	m = serve(t, c, r)
	if m.Rcode != dns.RcodeFormatError || len(m.Answer) != 0 {
		t.Fatalf("multi-question: expected FORMERR, as CoreDNS's server answers, got %v", m)
	}

	// Transfers need the transfer plugin in front (xfr.go).
	r = new(dns.Msg)
	r.SetAxfr("example.org.")
	r.SetEdns0(1232, false)
	if m = serve(t, c, r); m.Rcode != dns.RcodeRefused || len(m.IsEdns0().Option) == 0 {
		t.Fatalf("AXFR: %v", m)
	}

	// Another class than IN: refused here, not sent to a member.
	r = new(dns.Msg)
	r.SetQuestion("www.example.org.", dns.TypeA)
	r.Question[0].Qclass = dns.ClassCHAOS
	r.SetEdns0(1232, false)
	if m = serve(t, c, r); m.Rcode != dns.RcodeRefused || ede.Of(m) == nil {
		t.Fatalf("class CH: expected REFUSED with an Extended DNS Error, got %v", m)
	}

	// A NOTIFY from a primary: refused with a reason, as NSD refuses one
	// it is not configured to take (RFC 1996), never SERVFAIL.
	r = new(dns.Msg)
	r.SetNotify("example.org.")
	r.SetEdns0(1232, false)
	if m = serve(t, c, r); m.Rcode != dns.RcodeRefused || ede.Of(m) == nil || m.Opcode != dns.OpcodeNotify {
		t.Fatalf("NOTIFY: expected REFUSED with an Extended DNS Error, got %v", m)
	}

	// A member's notice of a write at the name voids its negative answer
	// (a write through any router comes with one), with this router's
	// lease token only.
	tok := [shardproto.TokenLen]byte{7}
	c.leases.byToken.Store(&map[[shardproto.TokenLen]byte]*Shard{tok: c.shards()[0]})
	nx := new(dns.Msg)
	nx.SetQuestion("nothere.example.org.", dns.TypeA)
	// Cached as the answer to an EDNS query: the router asks the members
	// with an OPT record, which carries the client's address (client.go).
	if m := c.neg.get("nothere.example.org.", dns.TypeA, true, false, c.changes.valid); m == nil {
		t.Fatal("expected the negative answer cached")
	}
	notice := shardproto.Notice{Zone: "example.org.", Change: shardproto.Records, Names: []string{"nothere.example.org."}}
	lease := shardproto.Lease{Token: tok, Time: time.Now()}
	for what, l := range map[string]shardproto.Lease{
		"a wrong token": {Token: [shardproto.TokenLen]byte{8}, Time: time.Now()},
		"an old lease":  {Token: tok, Time: time.Now().Add(-noticeAge - time.Second)},
	} {
		if m, _ := notice.Msg("example.org.", l, testKey); serve(t, c, m).Rcode != dns.RcodeRefused {
			t.Fatalf("a notice with %s: not refused", what)
		}
	}
	for what, k := range map[string]*shardproto.Key{"another key": shardproto.NewKey("another key"), "no key": nil} {
		if m, _ := notice.Msg("example.org.", lease, k); serve(t, c, m).Rcode != dns.RcodeRefused {
			t.Fatalf("a notice signed with %s: not refused", what)
		}
	}
	if m := c.neg.get("nothere.example.org.", dns.TypeA, true, false, c.changes.valid); m == nil {
		t.Fatal("a refused notice voided the negative answer")
	}
	msg, sent := notice.Msg("example.org.", lease, testKey)
	if m := serve(t, c, msg); m.Rcode != dns.RcodeSuccess || !shardproto.NoticeAcked(m, sent, testKey) {
		t.Fatalf("notice: %v", m)
	}
	if m := c.neg.get("nothere.example.org.", dns.TypeA, true, false, c.changes.valid); m != nil {
		t.Fatal("the negative answer outlived the notice of a write at its name")
	}
	// A notice that the zone was deleted drops its entries.
	deleted, _ := shardproto.Notice{Zone: "example.org.", Change: shardproto.ZoneDeleted}.Msg("example.org.", lease, testKey)
	if m := serve(t, c, deleted); m.Rcode != dns.RcodeSuccess || c.neg.len() != 0 {
		t.Fatalf("zone deleted: %v, %d entries left", m, c.neg.len())
	}
}

// holdLeases makes c hold change leases on its (in-memory) shards for an
// hour: its negative cache is on.
func holdLeases(c *Craftroute) {
	c.leases.port = 1
	c.leases.validUntil.Store(time.Now().Add(time.Hour).UnixNano())
}

// staleShards marks every answer of its shards stale, as a member answering
// from its unconfirmed state does (shardproto.AllowStale).
type staleShards struct{ exchanger }

func (s staleShards) exchange(ctx context.Context, sh *Shard, req *dns.Msg) (*dns.Msg, error) {
	resp, err := s.exchanger.exchange(ctx, sh, req)
	if err == nil {
		ede.Add(resp, dns.ExtendedErrorCodeStaleAnswer, "unconfirmed")
	}
	return resp, err
}

// TestServeStale: a negative answer built from stale shard answers is not
// cached (a write acknowledged before the shard lost its leader may be
// missing) and says it is stale.
func TestServeStale(t *testing.T) {
	c, _ := testRouter(t, "example.org.", serveZone, 3)
	c.neg = newNegCache(100)
	holdLeases(c)
	c.ex = staleShards{c.ex}
	r := new(dns.Msg)
	r.SetQuestion("nothere.example.org.", dns.TypeA)
	r.SetEdns0(1232, false)
	m := serve(t, c, r)
	if e := ede.Of(m); m.Rcode != dns.RcodeNameError || e == nil || e.InfoCode != dns.ExtendedErrorCodeStaleAnswer {
		t.Fatalf("expected NXDOMAIN marked stale, got %v", m)
	}
	if c.neg.len() != 0 {
		t.Errorf("a stale negative answer was cached")
	}
	// A name that exists: the owner shard's answer, marked stale once.
	r = new(dns.Msg)
	r.SetQuestion("www.example.org.", dns.TypeA)
	r.SetEdns0(1232, false)
	m = serve(t, c, r)
	n := 0
	for _, o := range m.IsEdns0().Option {
		if e, ok := o.(*dns.EDNS0_EDE); ok && e.InfoCode == dns.ExtendedErrorCodeStaleAnswer {
			n++
		}
	}
	if m.Rcode != dns.RcodeSuccess || len(m.Answer) == 0 || n != 1 {
		t.Errorf("expected the A record with one Stale Answer, got %d in %v", n, m)
	}
}

// heldShards marks every answer of its shards as read past an undecided
// transaction, as a member whose name a prepared part holds does
// (shardproto.MarkHeld).
type heldShards struct{ exchanger }

func (s heldShards) exchange(ctx context.Context, sh *Shard, req *dns.Msg) (*dns.Msg, error) {
	resp, err := s.exchanger.exchange(ctx, sh, req)
	if err == nil {
		shardproto.MarkHeld(resp)
	}
	return resp, err
}

// TestServeHeldNotCached: a negative answer built from answers read past an
// undecided transaction is right, but not cached (the commit may come at
// any moment), and the mark does not reach the client; the same answer
// unmarked is cached.
func TestServeHeldNotCached(t *testing.T) {
	c, _ := testRouter(t, "example.org.", serveZone, 3)
	c.neg = newNegCache(100)
	holdLeases(c)
	plain := c.ex
	c.ex = heldShards{plain}
	r := new(dns.Msg)
	r.SetQuestion("nothere.example.org.", dns.TypeA)
	r.SetEdns0(1232, false)
	m := serve(t, c, r)
	if m.Rcode != dns.RcodeNameError || ede.Of(m) != nil || shardproto.Held(m) {
		t.Fatalf("expected a plain NXDOMAIN, got %v", m)
	}
	if c.neg.len() != 0 {
		t.Errorf("an answer read past an undecided transaction was cached")
	}
	c.ex = plain
	if m := serve(t, c, r); m.Rcode != dns.RcodeNameError || c.neg.len() != 1 {
		t.Errorf("the same answer unmarked: expected it cached, got %d entries for %v", c.neg.len(), m)
	}
}
