package craftroute

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"

	"github.com/craftdns/craftdns/internal/ede"
	"github.com/craftdns/craftdns/internal/zoneapi"

	"github.com/miekg/dns"
)

const (
	updKey       = "upd.example.org."
	updSecret    = "c2VjcmV0LWZvci11cGRhdGVzLTEyMzQ1Njc4OTA="
	otherKey     = "other.example.org."
	otherSecret  = "b3RoZXItc2VjcmV0LTEyMzQ1Njc4OTAxMjM0NTY="
	shardEDEText = "key may not update this name"
)

// fakeMember is a craftstore member as UPDATE sees it: a TCP DNS server that
// verifies the TSIG, records what it got and answers signed.
type fakeMember struct {
	addr     string
	client   *tls.Config // the router's, for a member at a tls:// address
	close    bool        // close the connection instead of answering
	notReady bool        // answer SERVFAIL, Not Ready, as a stopping member does

	mu   sync.Mutex
	got  []*dns.Msg
	tsig []error // TsigStatus per message
}

func startFakeMember(t *testing.T, closeConn bool) *fakeMember {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fm := &fakeMember{addr: ln.Addr().String(), close: closeConn}
	srv := &dns.Server{Listener: ln, Net: "tcp", TsigSecret: map[string]string{updKey: updSecret},
		Handler: dns.HandlerFunc(fm.serve), MsgAcceptFunc: acceptAll}
	go srv.ActivateAndServe()
	t.Cleanup(func() { srv.Shutdown() })
	return fm
}

// startFakeMemberTLS is startFakeMember speaking only DNS over TLS, at a
// tls:// address.
func startFakeMemberTLS(t *testing.T) *fakeMember {
	t.Helper()
	server, client := testTLSPair(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", server)
	if err != nil {
		t.Fatal(err)
	}
	fm := &fakeMember{addr: "tls://" + ln.Addr().String(), client: client}
	srv := &dns.Server{Listener: ln, Net: "tcp-tls", TsigSecret: map[string]string{updKey: updSecret},
		Handler: dns.HandlerFunc(fm.serve), MsgAcceptFunc: acceptAll}
	go srv.ActivateAndServe()
	t.Cleanup(func() { srv.Shutdown() })
	return fm
}

// acceptAll lets UPDATE messages through, as CoreDNS does with AllowOpcode.
func acceptAll(dns.Header) dns.MsgAcceptAction { return dns.MsgAccept }

func (fm *fakeMember) serve(w dns.ResponseWriter, r *dns.Msg) {
	fm.mu.Lock()
	fm.got = append(fm.got, r.Copy())
	fm.tsig = append(fm.tsig, w.TsigStatus())
	fm.mu.Unlock()
	if fm.close {
		w.Close()
		return
	}
	m := new(dns.Msg)
	m.SetReply(r)
	if fm.notReady {
		// As ede.Write does: the Extended DNS Error only to a request
		// with EDNS.
		m.Rcode = dns.RcodeServerFailure
		if r.IsEdns0() != nil {
			m.SetEdns0(dns.DefaultMsgSize, false)
			m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_EDE{InfoCode: dns.ExtendedErrorCodeNotReady,
				ExtraText: "member is shutting down: nothing was written; write to another member"})
		}
	} else if len(r.Ns) > 0 && strings.HasPrefix(r.Ns[0].Header().Name, "forbidden.") {
		m.Rcode = dns.RcodeRefused
		m.SetEdns0(dns.DefaultMsgSize, false)
		m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_EDE{InfoCode: dns.ExtendedErrorCodeProhibited, ExtraText: shardEDEText})
	}
	if t := r.IsTsig(); t != nil && w.TsigStatus() == nil {
		m.SetTsig(t.Hdr.Name, t.Algorithm, 300, time.Now().Unix())
	}
	w.WriteMsg(m)
}

func (fm *fakeMember) received() ([]*dns.Msg, []error) {
	fm.mu.Lock()
	defer fm.mu.Unlock()
	return append([]*dns.Msg(nil), fm.got...), append([]error(nil), fm.tsig...)
}

// updateFront serves c behind the stock tsig plugin on loopback TCP, as a
// CoreDNS server block "tsig; craftroute" does, and returns its address.
func updateFront(t *testing.T, c *Craftroute) string {
	t.Helper()
	setup, err := caddy.DirectiveAction("dns", "tsig")
	if err != nil {
		t.Fatal(err)
	}
	ctrl := caddy.NewTestController("dns", "tsig example.org. {\n secret "+updKey+" "+updSecret+"\n secret "+otherKey+" "+otherSecret+"\n}")
	if err := setup(ctrl); err != nil {
		t.Fatal(err)
	}
	cfg := dnsserver.GetConfig(ctrl)
	h := cfg.Plugin[len(cfg.Plugin)-1](c)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{Listener: ln, Net: "tcp", TsigSecret: cfg.TsigSecret,
		Handler:       dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) { h.ServeDNS(context.Background(), w, r) }),
		MsgAcceptFunc: acceptAll}
	go srv.ActivateAndServe()
	t.Cleanup(func() { srv.Shutdown() })
	return ln.Addr().String()
}

// updateRouter returns a router of shards s0..s(n-1), each with the given
// members, knowing updKey, its zone laid out in memory for cut checks.
func updateRouter(t *testing.T, key string, members ...[]*fakeMember) *Craftroute {
	t.Helper()
	c := splitRouter(t, key, len(members))
	c.cfg.keys = map[string]string{updKey: updSecret}
	c.cfg.keyAlgs = map[string]string{updKey: dns.HmacSHA256}
	c.cfg.timeout, c.cfg.downFor = time.Second, time.Minute
	for i, s := range c.shards() {
		for _, fm := range members[i] {
			s.Members = append(s.Members, newMember(s.Name, fm.addr, time.Second, fm.client))
		}
	}
	rrs, err := zoneapi.ParseZone(splitOrigin, splitZone())
	if err != nil {
		t.Fatal(err)
	}
	zs := &zoneShards{}
	zs.load(c, splitOrigin, rrs)
	c.ex = zs
	return c
}

// sendUpdate sends an UPDATE of example.org. adding rrs, signed with key
// unless key is "", and returns the verified response.
func sendUpdate(t *testing.T, addr, key, secret string, rrs ...string) *dns.Msg {
	t.Helper()
	return sendUpdateEDNS(t, true, addr, key, secret, rrs...)
}

// sendUpdateEDNS is sendUpdate, with EDNS or without (as nsupdate sends).
func sendUpdateEDNS(t *testing.T, edns bool, addr, key, secret string, rrs ...string) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetUpdate(splitOrigin)
	for _, s := range rrs {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		m.Insert([]dns.RR{rr})
	}
	if edns {
		m.SetEdns0(1232, false)
	}
	cl := &dns.Client{Net: "tcp", Timeout: 5 * time.Second}
	if key != "" {
		m.SetTsig(key, dns.HmacSHA256, 300, time.Now().Unix())
		cl.TsigSecret = map[string]string{key: secret}
	}
	resp, _, err := cl.Exchange(m, addr)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func total(fms ...*fakeMember) int {
	n := 0
	for _, fm := range fms {
		got, _ := fm.received()
		n += len(got)
	}
	return n
}

// TestUpdateOverTLS: an UPDATE for a member at a tls:// address goes over
// TLS (the member speaks nothing else), signed for it, and its answer
// comes back.
func TestUpdateOverTLS(t *testing.T) {
	a := startFakeMemberTLS(t)
	c := updateRouter(t, keyZone, []*fakeMember{a})
	front := updateFront(t, c)
	resp := sendUpdate(t, front, updKey, updSecret, "www.example.org. 300 IN A 192.0.2.1")
	if resp.Rcode != dns.RcodeSuccess {
		t.Fatalf("expected NOERROR, got %s (%v)", dns.RcodeToString[resp.Rcode], ede.Of(resp))
	}
	got, status := a.received()
	if len(got) != 1 || status[0] != nil {
		t.Fatalf("the member got %d updates (TSIG %v)", len(got), status)
	}
}

func TestUpdateZoneMode(t *testing.T) {
	a, b := startFakeMember(t, false), startFakeMember(t, false)
	c := updateRouter(t, keyZone, []*fakeMember{a}, []*fakeMember{b})
	front := updateFront(t, c)
	owner, other := a, b
	if c.zoneShard(splitOrigin).Name == "s1" {
		owner, other = b, a
	}

	resp := sendUpdate(t, front, updKey, updSecret, "www.example.org. 300 IN A 192.0.2.1", "mail.example.org. 300 IN A 192.0.2.2")
	if resp.Rcode != dns.RcodeSuccess {
		t.Fatalf("expected NOERROR, got %s (%v)", dns.RcodeToString[resp.Rcode], ede.Of(resp))
	}
	got, status := owner.received()
	if len(got) != 1 || status[0] != nil {
		t.Fatalf("expected one update with a valid TSIG on the zone's shard, got %d %v", len(got), status)
	}
	if tsig := got[0].IsTsig(); tsig == nil || tsig.Hdr.Name != updKey {
		t.Errorf("expected the update signed with %s, got %v", updKey, tsig)
	}
	if len(got[0].Ns) != 2 || got[0].Question[0].Name != splitOrigin {
		t.Errorf("expected the update as sent, got %v", got[0])
	}
	if total(other) != 0 {
		t.Errorf("expected nothing on the other shard")
	}

	// The shard's rcode and Extended DNS Error come back.
	resp = sendUpdate(t, front, updKey, updSecret, "forbidden.example.org. 300 IN A 192.0.2.1")
	if resp.Rcode != dns.RcodeRefused || ede.Of(resp) == nil || ede.Of(resp).ExtraText != shardEDEText {
		t.Errorf("expected the shard's REFUSED and EDE, got %s %v", dns.RcodeToString[resp.Rcode], ede.Of(resp))
	}
}

func TestUpdateRefusedKeys(t *testing.T) {
	a, b := startFakeMember(t, false), startFakeMember(t, false)
	c := updateRouter(t, keyZone, []*fakeMember{a}, []*fakeMember{b})
	front := updateFront(t, c)

	for _, tc := range []struct{ key, secret, want string }{
		{otherKey, otherSecret, "no secret for key"},
		{"", "", "needs a valid TSIG"},
	} {
		resp := sendUpdate(t, front, tc.key, tc.secret, "www.example.org. 300 IN A 192.0.2.1")
		e := ede.Of(resp)
		if resp.Rcode != dns.RcodeRefused || e == nil || e.InfoCode != dns.ExtendedErrorCodeProhibited || !strings.Contains(e.ExtraText, tc.want) {
			t.Errorf("key %q: expected REFUSED with EDE %q, got %s %v", tc.key, tc.want, dns.RcodeToString[resp.Rcode], e)
		}
	}
	if n := total(a, b); n != 0 {
		t.Errorf("expected nothing forwarded, got %d messages", n)
	}
}

func TestUpdateNameMode(t *testing.T) {
	a, b := startFakeMember(t, false), startFakeMember(t, false)
	c := updateRouter(t, keyName, []*fakeMember{a}, []*fakeMember{b})
	front := updateFront(t, c)
	fm := map[string]*fakeMember{"s0": a, "s1": b}

	// Two names owned by different shards.
	var n0, n1 string
	for i := 0; i < 200 && (n0 == "" || n1 == ""); i++ {
		n := "h" + string(rune('a'+i%26)) + strings.Repeat("x", i/26) + ".example.org."
		if c.shardFor(n).Name == "s0" && n0 == "" {
			n0 = n
		} else if c.shardFor(n).Name == "s1" && n1 == "" {
			n1 = n
		}
	}
	for _, tc := range []struct {
		name string
		rrs  []string
		want string
	}{
		{"two shards", []string{n0 + " 300 IN A 192.0.2.1", n1 + " 300 IN A 192.0.2.2"}, "update spans shards s0, s1"},
		{"apex", []string{n0 + " 300 IN A 192.0.2.1", "example.org. 300 IN TXT x"}, "example.org. (on every shard)"},
		{"glue below a cut", []string{"ns9.sub.example.org. 300 IN A 192.0.2.1"}, "ns9.sub.example.org. (on every shard)"},
	} {
		resp := sendUpdate(t, front, updKey, updSecret, tc.rrs...)
		e := ede.Of(resp)
		// Without shard APIs the router cannot run the transaction.
		if resp.Rcode != dns.RcodeRefused || e == nil || !strings.Contains(e.ExtraText, tc.want) || !strings.Contains(e.ExtraText, "shard_api") {
			t.Errorf("%s: expected REFUSED with EDE %q, got %s %v", tc.name, tc.want, dns.RcodeToString[resp.Rcode], e)
		}
	}
	if n := total(a, b); n != 0 {
		t.Fatalf("expected nothing forwarded for spanning updates, got %d", n)
	}

	// One name: forwarded to its owner.
	resp := sendUpdate(t, front, updKey, updSecret, n1+" 300 IN A 192.0.2.2", n1+" 300 IN TXT y")
	if resp.Rcode != dns.RcodeSuccess {
		t.Fatalf("expected NOERROR, got %s %v", dns.RcodeToString[resp.Rcode], ede.Of(resp))
	}
	if got, status := fm["s1"].received(); len(got) != 1 || status[0] != nil {
		t.Errorf("expected one signed update on s1, got %d %v", len(got), status)
	}
	if total(fm["s0"]) != 0 {
		t.Errorf("expected nothing on s0")
	}
}

func TestUpdateMemberFailover(t *testing.T) {
	// A member that cannot be reached is skipped.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := &fakeMember{addr: ln.Addr().String()}
	ln.Close()
	live := startFakeMember(t, false)
	c := updateRouter(t, keyZone, []*fakeMember{dead, live})
	front := updateFront(t, c)
	resp := sendUpdate(t, front, updKey, updSecret, "www.example.org. 300 IN A 192.0.2.1")
	if resp.Rcode != dns.RcodeSuccess || total(live) != 1 {
		t.Errorf("expected the update on the live member, got %s and %d messages", dns.RcodeToString[resp.Rcode], total(live))
	}

	// A member that took the update and did not answer is not replaced.
	x, y := startFakeMember(t, true), startFakeMember(t, true)
	c = updateRouter(t, keyZone, []*fakeMember{x, y})
	front = updateFront(t, c)
	resp = sendUpdate(t, front, updKey, updSecret, "www.example.org. 300 IN A 192.0.2.1")
	e := ede.Of(resp)
	if resp.Rcode != dns.RcodeServerFailure || e == nil || !strings.Contains(e.ExtraText, "may or may not have been applied") {
		t.Errorf("expected SERVFAIL saying the update may have been applied, got %s %v", dns.RcodeToString[resp.Rcode], e)
	}
	if n := total(x, y); n != 1 {
		t.Errorf("expected the update sent once, got %d", n)
	}
}

// TestUpdateNotReadyFailover: a member that answers SERVFAIL with Not Ready
// (stopping, cut off: it wrote nothing) is followed by the next one; when
// every member says so, the client gets the last answer.
func TestUpdateNotReadyFailover(t *testing.T) {
	stopping, live := startFakeMember(t, false), startFakeMember(t, false)
	stopping.notReady = true
	c := updateRouter(t, keyZone, []*fakeMember{stopping, live})
	front := updateFront(t, c)
	// The live member marked down comes last: the stopping one is asked
	// first, says it wrote nothing, and the live one takes the update;
	// also from a client without EDNS (nsupdate), whose update goes to the
	// members with EDNS so that they can say why.
	for i, edns := range []bool{true, false} {
		c.shards()[0].Members[0].alive.Store(0) // the stopping member, up again
		c.shards()[0].Members[1].Failed(time.Now(), time.Minute)
		resp := sendUpdateEDNS(t, edns, front, updKey, updSecret, "www.example.org. 300 IN A 192.0.2.1")
		if resp.Rcode != dns.RcodeSuccess || total(stopping) != i+1 || total(live) != i+1 {
			t.Errorf("EDNS %v: expected the update taken by the live member after the stopping one, got %s, %d and %d messages",
				edns, dns.RcodeToString[resp.Rcode], total(stopping), total(live))
		}
	}

	// Each member gets the update signed (signing on send takes the TSIG
	// record off a message: one sent again would go unsigned).
	for _, fm := range []*fakeMember{stopping, live} {
		msgs, statuses := fm.received()
		for i, m := range msgs {
			if m.IsTsig() == nil || statuses[i] != nil {
				t.Errorf("member %s got update %d unsigned or badly signed: %v", fm.addr, i, statuses[i])
			}
		}
	}

	a, b := startFakeMember(t, false), startFakeMember(t, false)
	a.notReady, b.notReady = true, true
	c = updateRouter(t, keyZone, []*fakeMember{a, b})
	front = updateFront(t, c)
	resp := sendUpdate(t, front, updKey, updSecret, "www.example.org. 300 IN A 192.0.2.1")
	e := ede.Of(resp)
	if resp.Rcode != dns.RcodeServerFailure || e == nil || e.InfoCode != dns.ExtendedErrorCodeNotReady || total(a, b) != 2 {
		t.Errorf("expected SERVFAIL Not Ready after both members, got %s %v, %d messages", dns.RcodeToString[resp.Rcode], e, total(a, b))
	}
}

func TestUpdateNotAuth(t *testing.T) {
	a := startFakeMember(t, false)
	c := updateRouter(t, keyZone, []*fakeMember{a})
	c.zones = newZoneSet(nil) // the server block's zone example.org. only
	m := new(dns.Msg)
	m.SetUpdate("example.net.")
	m.SetEdns0(1232, false)
	rec := &recorder{}
	c.serveUpdate(context.Background(), rec, m)
	if rec.msg == nil || rec.msg.Rcode != dns.RcodeNotAuth || ede.Of(rec.msg) == nil {
		t.Errorf("expected NOTAUTH with EDE, got %v", rec.msg)
	}
	if total(a) != 0 {
		t.Errorf("expected nothing forwarded")
	}
}

// recorder is a dns.ResponseWriter that keeps the message written.
type recorder struct {
	dns.ResponseWriter
	msg *dns.Msg
}

func (r *recorder) WriteMsg(m *dns.Msg) error { r.msg = m; return nil }
