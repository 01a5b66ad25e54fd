package craftroute

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"

	"github.com/craftdns/craftdns/internal/dnswire"
	"github.com/craftdns/craftdns/internal/ede"
	"github.com/craftdns/craftdns/internal/policy"
	"github.com/craftdns/craftdns/internal/shardproto"

	"github.com/miekg/dns"
)

// fastClients are client queries of the kinds the fast path takes.
func fastClients() []*dns.Msg {
	var out []*dns.Msg
	for i, name := range []string{"www.example.org.", "WwW.Example.ORG.", "a.b.c.example.org.", `we\.ird\032name.example.org.`} {
		for j, edns := range []func(*dns.Msg){
			func(*dns.Msg) {},
			func(m *dns.Msg) { m.SetEdns0(1232, false) },
			func(m *dns.Msg) { m.SetEdns0(4096, true) },
			func(m *dns.Msg) { m.SetEdns0(100, false) },
			func(m *dns.Msg) {
				m.SetEdns0(1232, true)
				o := m.IsEdns0()
				o.Option = append(o.Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0123456789abcdef"})
			},
		} {
			m := new(dns.Msg)
			m.SetQuestion(name, []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeTXT, dns.TypeMX}[(i+j)%4])
			m.Id = uint16(1000*i + j)
			m.RecursionDesired = j%2 == 0
			m.CheckingDisabled = j == 3
			edns(m)
			out = append(out, m)
		}
	}
	return out
}

// slowQuery packs the query the slow path sends a member for client
// query r from client (ID 0): withClient, query or forward, the index
// Craftroute.exchange sets and the epoch routing.markEpoch adds.
func slowQuery(t testing.TB, r *dns.Msg, client net.Addr, fresh bool, index uint64, withIndex bool, epoch uint64) []byte {
	t.Helper()
	q, _, err := withClient(r, client)
	if err != nil {
		t.Fatal(err)
	}
	var req *dns.Msg
	if fresh {
		req = forward(q)
	} else {
		req = query(q, q.Question[0].Name, q.Question[0].Qtype)
	}
	if withIndex {
		shardproto.SetMinIndex(req, index)
	}
	shardproto.SetEpoch(req, epoch, true)
	req.Id = 0
	b, err := req.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFastQueryEqualsSlowQuery: the query the fast path writes is the
// bytes of the one the slow path packs.
func TestFastQueryEqualsSlowQuery(t *testing.T) {
	for _, client := range []net.Addr{
		&net.UDPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 5353},
		&net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 5353},
		&net.UDPAddr{IP: net.ParseIP("::ffff:198.51.100.1"), Port: 53},
	} {
		for _, r := range fastClients() {
			for _, v := range []struct {
				fresh, withIndex bool
				index, epoch     uint64
			}{{false, true, 12345, 3}, {false, false, 0, 0}, {true, true, 7, 0}, {true, false, 0, 9}} {
				var qb [fastQueryMax]byte
				got, qend, ok := appendFastQuery(qb[:0], r, policy.AddrOf(client), v.fresh, v.index, v.withIndex, v.epoch)
				if !ok {
					t.Fatalf("%v: not written", r.Question[0])
				}
				want := slowQuery(t, r, client, v.fresh, v.index, v.withIndex, v.epoch)
				if !bytes.Equal(got, want) {
					t.Fatalf("%v from %v %+v:\nfast % x\nslow % x", r.Question[0], client, v, got, want)
				}
				if end, ok := dnswire.SkipQuestions(got, 1); !ok || end != qend {
					t.Fatalf("question ends at %d, not %d", end, qend)
				}
			}
		}
	}
}

// memberAnswer is a member's answer to the fast path's query for client
// query r from client: what craftstore's answer adds (facts, the ECS echo
// of a policy's answer, index, serial and their MAC, under key) around
// the records fill gives.
func memberAnswer(t testing.TB, r *dns.Msg, client net.Addr, key *shardproto.Key, named bool, fill func(m *dns.Msg), extra func(m *dns.Msg)) []byte {
	t.Helper()
	wire := slowQuery(t, r, client, !named, 5, true, 0)
	q := new(dns.Msg)
	if err := q.Unpack(wire); err != nil {
		t.Fatal(err)
	}
	m := new(dns.Msg)
	m.SetReply(q)
	m.Authoritative = true
	m.SetEdns0(dns.DefaultMsgSize, q.IsEdns0().Do())
	fill(m)
	if named {
		shardproto.Attach(m, shardproto.Facts{Kind: shardproto.Final, Origin: "example.org."})
	}
	shardproto.AttachIndex(m, 42)
	if named {
		shardproto.AttachSerial(m, "example.org.", 7, 1)
	}
	shardproto.SignAnswer(m, key)
	if extra != nil {
		extra(m)
	}
	// The member's ScrubWriter.
	state := request.Request{Req: q, W: &test.ResponseWriter{}}
	state.SizeAndDo(m)
	state.Scrub(m)
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// slowRelay is what the slow path writes for member answer ans to client
// query r from client (resolveOnce, resolveName, withoutClient, the
// server's ScrubWriter) for an answer it would relay unchanged; ok is
// false when it cannot read ans.
func slowRelay(ans []byte, r *dns.Msg, client net.Addr, tcp bool) ([]byte, bool) {
	resp := new(dns.Msg)
	if err := resp.Unpack(ans); err != nil {
		return nil, false
	}
	shardproto.Strip(resp)
	resp.Id, resp.Question = r.Id, r.Question
	if r.IsEdns0() == nil {
		resp.Extra = withoutOPT(resp.Extra)
	}
	q, added, _ := withClient(r, client)
	if added {
		resp = withoutClient(resp, r)
	}
	_ = q
	w := &test.ResponseWriter{TCP: tcp}
	if ip, ok := client.(*net.UDPAddr); ok {
		w.RemoteIP = ip.IP.String()
	}
	state := request.Request{Req: r, W: w}
	state.SizeAndDo(resp)
	state.Scrub(resp)
	b, err := resp.Pack()
	if err != nil {
		return nil, false
	}
	return b, true
}

// judge runs judgeAnswer on a copy of ans as serveFast does.
func judge(ans []byte, r *dns.Msg, named bool, tcp bool) ([]byte, relayed, bool) {
	ans = bytes.Clone(ans)
	h, ok := dnswire.ParseHeader(ans)
	if !ok {
		return nil, relayed{}, false
	}
	// serveFast takes only an answer to the question it asked.
	var qb [fastQueryMax]byte
	query, qend, ok := appendFastQuery(qb[:0], r, netip.Addr{}, !named, 0, false, 0)
	if !ok || h.QD != 1 || len(ans) < qend || !bytes.Equal(ans[dnswire.HeaderLen:qend], query[dnswire.HeaderLen:qend]) {
		return nil, relayed{}, false
	}
	opt := r.IsEdns0()
	size := dns.MinMsgSize
	switch {
	case tcp:
		size = dns.MaxMsgSize
	case opt != nil:
		size = max(size, int(opt.UDPSize()))
	}
	out, _, rel, ok := judgeAnswer(ans, h, qend, named, opt != nil, opt != nil && opt.Do(), opt, size, tcp)
	if ok {
		binary.BigEndian.PutUint16(out, r.Id)
	}
	return out, rel, ok
}

func TestJudgeAnswer(t *testing.T) {
	key := shardproto.NewKey("fast-path-test-key-0123456789abcdef")
	client := &net.UDPAddr{IP: net.IPv4(10, 240, 0, 1), Port: 40212}
	a := func(m *dns.Msg) { m.Answer = append(m.Answer, test.A(m.Question[0].Name+" 300 IN A 192.0.2.1")) }
	for _, tc := range []struct {
		name  string
		named bool
		fill  func(m *dns.Msg)
		extra func(m *dns.Msg)
		relay bool
	}{
		{"A", true, a, nil, true},
		{"A, key mode zone", false, a, nil, true},
		{"MX, SRV, TXT and AAAA", true, func(m *dns.Msg) {
			n := m.Question[0].Name
			m.Answer = append(m.Answer, test.MX(n+" 300 IN MX 10 mail.example.org."), test.SRV(n+" 300 IN SRV 1 2 3 t.example.org."),
				test.TXT(n+` 300 IN TXT "a b" "c\"d"`), test.AAAA(n+" 300 IN AAAA 2001:db8::1"))
		}, nil, true},
		{"a policy's answer (ECS echo cut)", true, a, func(m *dns.Msg) {
			o := m.IsEdns0()
			o.Option = append(o.Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 32, SourceScope: 24, Address: net.IPv4(10, 240, 0, 1).To4()})
		}, true},
		{"held", true, a, func(m *dns.Msg) { shardproto.MarkHeld(m) }, true},
		{"CNAME", true, func(m *dns.Msg) {
			m.Answer = append(m.Answer, test.CNAME(m.Question[0].Name+" 300 IN CNAME www.example.org."))
		}, nil, false},
		{"CNAME, key mode zone", false, func(m *dns.Msg) {
			m.Answer = append(m.Answer, test.CNAME(m.Question[0].Name+" 300 IN CNAME www.example.org."), test.A("www.example.org. 300 IN A 192.0.2.1"))
		}, nil, true},
		{"NODATA", true, func(m *dns.Msg) {
			m.Ns = append(m.Ns, test.SOA("example.org. 300 IN SOA ns.example.org. h.example.org. 1 2 3 4 5"))
		}, nil, false},
		{"NXDOMAIN, key mode zone", false, func(m *dns.Msg) {
			m.Rcode = dns.RcodeNameError
			m.Ns = append(m.Ns, test.SOA("example.org. 300 IN SOA ns.example.org. h.example.org. 1 2 3 4 5"))
		}, nil, true},
		{"SERVFAIL", true, func(m *dns.Msg) { m.Rcode = dns.RcodeServerFailure }, nil, false},
		{"an epoch notice", true, a, func(m *dns.Msg) { shardproto.AttachEpoch(m, 9, false) }, false},
		{"an Extended DNS Error", true, a, func(m *dns.Msg) { ede.Add(m, dns.ExtendedErrorCodeStaleAnswer, "stale") }, false},
		{"truncated", true, func(m *dns.Msg) { a(m); m.Truncated = true }, nil, false},
		{"an unchecked type", true, func(m *dns.Msg) {
			m.Answer = append(m.Answer, test.CAA(m.Question[0].Name+` 300 IN CAA 0 issue "ca.example.net"`))
		}, nil, false},
		{"too long", true, func(m *dns.Msg) {
			for i := range 90 {
				m.Answer = append(m.Answer, test.A(m.Question[0].Name+" 300 IN A 192.0.2."+string(rune('0'+i%10))))
			}
		}, nil, false},
	} {
		for _, r := range fastClients() {
			ans := memberAnswer(t, r, client, key, tc.named, tc.fill, tc.extra)
			out, rel, ok := judge(ans, r, tc.named, false)
			if tc.name == "too long" && r.IsEdns0() == nil {
				// Too long for 512 bytes either way.
				if ok {
					t.Fatalf("%s: relayed to a client without EDNS", tc.name)
				}
				continue
			}
			small := r.IsEdns0() != nil && r.IsEdns0().UDPSize() < 512
			if !ok {
				if tc.relay && !(small && len(ans) > 512) {
					t.Fatalf("%s, client %v: not relayed", tc.name, r)
				}
				continue
			}
			if !tc.relay {
				t.Fatalf("%s: relayed", tc.name)
			}
			want, ok := slowRelay(ans, r, client, false)
			if !ok || !bytes.Equal(out, want) {
				t.Fatalf("%s, client %v:\nfast % x\nslow % x", tc.name, r, out, want)
			}
			if tc.named && (rel.index == nil || rel.serial == nil || !shardproto.PartsSigned(key, rel.mac, rel.index, rel.serial)) {
				t.Fatalf("%s: the private options were not read: %+v", tc.name, rel)
			}
		}
	}
}

// FuzzRelay: whatever a member (or anyone reaching the router's member
// sockets) sends, an answer the fast path relays is the slow path's bytes
// for it.
func FuzzRelay(f *testing.F) {
	key := shardproto.NewKey("fast-path-test-key-0123456789abcdef")
	client := &net.UDPAddr{IP: net.IPv4(10, 240, 0, 1), Port: 40212}
	clients := fastClients()
	for i, r := range clients {
		ans := memberAnswer(f, r, client, key, i%3 != 0, func(m *dns.Msg) {
			m.Answer = append(m.Answer, test.A(m.Question[0].Name+" 300 IN A 192.0.2.1"), test.TXT(m.Question[0].Name+` 300 IN TXT "x"`))
		}, nil)
		f.Add(uint8(i), i%3 != 0, false, ans)
	}
	f.Fuzz(func(t *testing.T, which uint8, named, tcp bool, ans []byte) {
		r := clients[int(which)%len(clients)]
		out, _, ok := judge(ans, r, named, tcp)
		if !ok {
			return
		}
		want, ok := slowRelay(ans, r, client, tcp)
		if !ok {
			t.Fatalf("relayed an answer the slow path cannot read: % x", ans)
		}
		if !bytes.Equal(out, want) {
			t.Fatalf("relayed\n% x\nthe slow path writes\n% x\nfor % x", out, want, ans)
		}
	})
}

// TestLearnWire: a relayed answer's index and serial are kept when the
// member signed them, and only then; a serial the shard's last answer
// carried already is passed by.
func TestLearnWire(t *testing.T) {
	key := shardproto.NewKey("fast-path-test-key-0123456789abcdef")
	client := &net.UDPAddr{IP: net.IPv4(10, 240, 0, 1), Port: 40212}
	r := fastClients()[1]
	ans := memberAnswer(t, r, client, key, true, func(m *dns.Msg) {
		m.Answer = append(m.Answer, test.A(m.Question[0].Name+" 300 IN A 192.0.2.1"))
	}, nil)
	_, rel, ok := judge(ans, r, true, false)
	if !ok {
		t.Fatal("not relayed")
	}
	c := &Craftroute{}
	c.leases.key = key
	s := &Shard{Name: "s0"}
	serialOf := func() (uint32, bool) {
		c.soa.mu.Lock()
		defer c.soa.mu.Unlock()
		z := c.soa.m["example.org."]
		if z == nil {
			return 0, false
		}
		sh, ok := z.shards["s0"]
		return sh.serial, ok
	}

	// Forged: the serial changed under the member's MAC.
	forged := rel
	forged.serial = bytes.Clone(rel.serial)
	forged.serial[3] = 9
	forged.index = binary.BigEndian.AppendUint64(nil, 99)
	c.learnWire(s, forged)
	if _, ok := serialOf(); ok || s.minIndex.Load() != 0 {
		t.Fatalf("a forged answer was kept: serial known %v, index %d", ok, s.minIndex.Load())
	}
	c.learnWire(s, rel)
	if got, ok := serialOf(); !ok || got != 7 || s.minIndex.Load() != 42 {
		t.Fatalf("signed answer: serial %d (%v), index %d; want 7 and 42", got, ok, s.minIndex.Load())
	}
	if s.lastSerial.Load() == nil || !bytes.Equal(*s.lastSerial.Load(), rel.serial) {
		t.Fatal("the shard's last serial was not kept")
	}
	// The same again is passed by; a forged new serial still is not kept.
	c.learnWire(s, rel)
	forged.index = rel.index
	c.learnWire(s, forged)
	if got, _ := serialOf(); got != 7 {
		t.Fatalf("serial %d after a forged one, want 7", got)
	}
}
