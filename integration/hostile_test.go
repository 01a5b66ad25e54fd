package integration

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
	"github.com/craftdns/craftdns/internal/dnsdiff"
	"github.com/craftdns/craftdns/internal/shardproto"

	"github.com/miekg/dns"
)

// Bounds of the flood: packets per target, TCP connections per target,
// and the time it may take in all.
const (
	hostilePackets = 30000
	hostileConns   = 200
	hostileFor     = 30 * time.Second
)

// TestHostileInput: members and a router answer malformed and unusual
// messages as one authoritative server does, then take a bounded flood of
// malformed packets, TCP garbage and bad HTTP bodies (loopback only) while
// their answers are compared with an unsharded member's; the answers stay
// equal, every process stays up and ready, and nothing is written.
func TestHostileInput(t *testing.T) {
	const origin = "hostile.example."
	wd := harness.Workdir(t)
	s := startSharded(t, wd, 2, 3, []string{origin}, routerSpec{zones: []string{origin}, key: "name"})
	singleAddr, single := startSingle(t, wd, []string{origin})
	text, queries := dnsdiff.GenerateZone(origin, 5, 300)
	putZone(t, single, origin, text)
	r := s.routers[0]
	putZone(t, r.client(), origin, text)
	sample := sampleQueries(queries, 4)
	members := []*shardMember{s.members["a"][0], s.members["b"][1]}
	targets := []string{r.addr(), members[0].addr(), members[1].addr()}
	harness.Eventually(t, "the zone through the router", 20*time.Second, func() bool {
		m, err := harness.Query(r.addr(), origin, dns.TypeSOA)
		return err == nil && m.Rcode == dns.RcodeSuccess
	})
	s.shardRecords(origin) // every member holds its shard's part
	serials := s.memberSerials(t, origin)

	t.Run("one server", func(t *testing.T) {
		for _, tc := range oddMessages(origin) {
			want, errW := exchangeRaw(singleAddr, tc.wire)
			if errW != nil || want.Rcode != tc.rcode {
				t.Errorf("%s: expected %s from the unsharded member, got %v %v", tc.name, dns.RcodeToString[tc.rcode], rcodeOf(want), errW)
			}
			for _, a := range targets {
				got, err := exchangeRaw(a, tc.wire)
				if err != nil || got.Rcode != tc.rcode {
					t.Errorf("%s at %s: expected %s, got %v %v", tc.name, a, dns.RcodeToString[tc.rcode], rcodeOf(got), err)
				}
			}
		}
	})

	t.Run("flood", func(t *testing.T) {
		deadline := time.Now().Add(hostileFor)
		var wg sync.WaitGroup
		var sent, conns, bodies atomic.Int64
		for i, a := range targets {
			wg.Go(func() { sent.Add(floodUDP(t, a, int64(i+1), deadline)) })
			wg.Go(func() { conns.Add(floodTCP(t, a, int64(i+1), deadline)) })
		}
		for _, api := range []harness.API{r.client(), members[0].client(), members[1].client()} {
			wg.Go(func() { bodies.Add(badBodies(t, api, origin, deadline)) })
		}
		// While the flood runs, every answer through the router and from
		// the members' own state must still equal the unsharded one.
		rounds := 0
		for time.Now().Before(deadline.Add(-5 * time.Second)) {
			res := compareWithRef(singleAddr, []string{r.addr()}, sample, true)
			if d := res[r.addr()]; d.differ > 0 {
				t.Errorf("during the flood, %d of %d answers through the router differ from the unsharded member's, %s", d.differ, len(sample), d)
				break
			}
			rounds++
		}
		wg.Wait()
		t.Logf("flood: %d malformed packets, %d TCP connections of garbage, %d bad HTTP requests; %d rounds of %d queries compared meanwhile",
			sent.Load(), conns.Load(), bodies.Load(), rounds, len(sample))
		if rounds == 0 {
			t.Error("expected at least one round of answers compared during the flood")
		}
	})

	for _, p := range s.procs {
		if logs := p.Logs(); strings.Contains(logs, "panic") || strings.Contains(logs, "fatal error") {
			t.Errorf("a process panicked:\n%s", tail(logs, 4096))
		}
	}
	for _, sh := range s.shards {
		for _, m := range s.members[sh] {
			harness.WaitReady(t, fmt.Sprintf("http://127.0.0.1:%d/ready", m.ready), s.procs...)
		}
	}
	harness.WaitReady(t, fmt.Sprintf("http://127.0.0.1:%d/ready", r.rdy), s.procs...)
	if after := s.memberSerials(t, origin); !mapsEqual(after, serials) {
		t.Errorf("expected nothing written by the flood: zone serials %v before, %v after", serials, after)
	}
	res := compareWithRef(singleAddr, []string{r.addr()}, sample, true)
	if d := res[r.addr()]; d.differ > 0 {
		t.Errorf("after the flood, %d of %d answers through the router differ from the unsharded member's, %s", d.differ, len(sample), d)
	}
}

// memberSerials returns the zone serial every member's API lists.
func (s *sharded) memberSerials(t *testing.T, zone string) map[string]uint32 {
	t.Helper()
	out := map[string]uint32{}
	for _, sh := range s.shards {
		for _, m := range s.members[sh] {
			var zones []struct {
				Zone   string `json:"zone"`
				Serial uint32 `json:"serial"`
			}
			if code, err := m.client().Do("GET", "/v1/zones", nil, &zones); err != nil || code != http.StatusOK {
				t.Fatalf("GET /v1/zones at %s: %d %v", m.name, code, err)
			}
			for _, z := range zones {
				if z.Zone == zone {
					out[m.name] = z.Serial
				}
			}
			if _, ok := out[m.name]; !ok {
				t.Fatalf("member %s does not hold %s: %+v", m.name, zone, zones)
			}
		}
	}
	return out
}

func mapsEqual(a, b map[string]uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// oddMessage is a crafted message and the rcode one authoritative server
// answers it with.
type oddMessage struct {
	name  string
	wire  []byte
	rcode int
}

// oddMessages are the unusual and malformed messages of the "one server"
// check: unknown opcodes, no question or two, other classes, a NOTIFY and
// an unsigned UPDATE, and questions that do not parse.
func oddMessages(origin string) []oddMessage {
	q := func(edit func(m *dns.Msg)) []byte {
		m := new(dns.Msg)
		m.SetQuestion("www."+origin, dns.TypeA)
		m.RecursionDesired = false
		if edit != nil {
			edit(m)
		}
		b, err := m.Pack()
		if err != nil {
			panic(err)
		}
		return b
	}
	header := func(b []byte, qd uint16) []byte {
		b = bytes.Clone(b)
		binary.BigEndian.PutUint16(b[4:], qd)
		return b
	}
	base := q(nil)
	badLabel := bytes.Clone(base[:12])
	badLabel = append(badLabel, 0x45) // a label length of 69 (over 63)
	badLabel = append(badLabel, bytes.Repeat([]byte{'a'}, 69)...)
	badLabel = append(badLabel, 0, 0, 1, 0, 1)
	loop := append(bytes.Clone(base[:12]), 0xc0, 12, 0, 1, 0, 1) // a name that points at itself
	var out []oddMessage
	for _, op := range []int{3, 6, 7, 15} {
		out = append(out, oddMessage{fmt.Sprintf("opcode %d", op), q(func(m *dns.Msg) { m.Opcode = op }), dns.RcodeNotImplemented})
	}
	out = append(out,
		oddMessage{"no question", header(base[:12], 0), dns.RcodeFormatError},
		oddMessage{"two questions", q(func(m *dns.Msg) {
			m.Question = append(m.Question, dns.Question{Name: "ns1." + origin, Qtype: dns.TypeA, Qclass: dns.ClassINET})
		}), dns.RcodeFormatError},
		oddMessage{"class CH", q(func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassCHAOS }), dns.RcodeRefused},
		oddMessage{"class HS", q(func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassHESIOD }), dns.RcodeRefused},
		oddMessage{"NOTIFY", q(func(m *dns.Msg) {
			m.SetNotify(origin)
		}), dns.RcodeRefused},
		oddMessage{"unsigned UPDATE", q(func(m *dns.Msg) {
			m.SetUpdate(origin)
			m.Insert([]dns.RR{&dns.A{Hdr: dns.RR_Header{Name: "x." + origin, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(192, 0, 2, 1)}})
		}), dns.RcodeRefused},
		oddMessage{"label over 63 octets", badLabel, dns.RcodeFormatError},
		oddMessage{"compression loop", loop, dns.RcodeFormatError},
		oddMessage{"question cut short", base[:len(base)-3], dns.RcodeFormatError},
	)
	return out
}

func rcodeOf(m *dns.Msg) string {
	if m == nil {
		return "no answer"
	}
	return dns.RcodeToString[m.Rcode]
}

// exchangeRaw sends wire over UDP and returns the reply, unpacked as far as
// its header when the rest does not parse (a FORMERR may echo a question
// that does not).
func exchangeRaw(addr string, wire []byte) (*dns.Msg, error) {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var last error
	for try := 0; try < 3; try++ {
		if _, err := c.Write(wire); err != nil {
			return nil, err
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		b := make([]byte, 65535)
		n, err := c.Read(b)
		if err != nil {
			last = err
			continue
		}
		m := new(dns.Msg)
		if err := m.Unpack(b[:n]); err != nil && n >= 12 {
			m = &dns.Msg{}
			m.Id = binary.BigEndian.Uint16(b)
			m.Rcode = int(b[3] & 0x0f)
		} else if err != nil {
			return nil, err
		}
		return m, nil
	}
	return nil, last
}

// hostilePacket returns a malformed or unusual message: a valid query,
// NOTIFY or UPDATE with bytes flipped, cut short or lengthened, random
// bytes, a header that announces far more records than follow, or a query
// that carries the routers' partition option, a forged change lease or a
// broken EDNS option.
func hostilePacket(rng *rand.Rand, origin string) []byte {
	m := new(dns.Msg)
	names := []string{"www." + origin, origin, "nothing." + origin, "a.b.c." + origin, "other.example."}
	m.SetQuestion(names[rng.IntN(len(names))], uint16(rng.IntN(70)))
	switch rng.IntN(6) {
	case 0:
		m.SetNotify(origin)
	case 1:
		m.SetUpdate(origin)
		m.Insert([]dns.RR{&dns.TXT{Hdr: dns.RR_Header{Name: "x." + origin, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 60}, Txt: []string{"hostile"}}})
	case 2:
		m.SetEdns0(uint16(rng.IntN(65536)), rng.IntN(2) == 0)
		opt := m.IsEdns0()
		opt.Option = append(opt.Option, &dns.EDNS0_LOCAL{Code: shardproto.Code, Data: randBytes(rng, rng.IntN(40))})
	case 3:
		m.SetEdns0(1232, false)
		opt := m.IsEdns0()
		opt.Option = append(opt.Option, &dns.EDNS0_LOCAL{Code: uint16(rng.IntN(65536)), Data: randBytes(rng, rng.IntN(300))})
	case 4:
		// A change lease asked for by someone without the routers' key
		// (TestForgedLeases): the plain answer, no lease.
		forgeLease(m, rng, 0)
	}
	m.Opcode = []int{dns.OpcodeQuery, dns.OpcodeQuery, dns.OpcodeQuery, m.Opcode, rng.IntN(16)}[rng.IntN(5)]
	m.Question[0].Qclass = []uint16{dns.ClassINET, dns.ClassINET, dns.ClassCHAOS, dns.ClassANY, dns.ClassNONE, uint16(rng.IntN(65536))}[rng.IntN(6)]
	b, err := m.Pack()
	if err != nil {
		return randBytes(rng, 12+rng.IntN(100))
	}
	switch rng.IntN(6) {
	case 0: // flip bytes
		for i := rng.IntN(8) + 1; i > 0; i-- {
			b[rng.IntN(len(b))] ^= byte(1 + rng.IntN(255))
		}
	case 1: // cut short
		b = b[:rng.IntN(len(b))]
	case 2: // garbage behind
		b = append(b, randBytes(rng, rng.IntN(600))...)
	case 3: // counts far beyond what follows
		for off := 4; off < 12; off += 2 {
			binary.BigEndian.PutUint16(b[off:], uint16(rng.IntN(65536)))
		}
	case 4:
		b = randBytes(rng, rng.IntN(1500))
	}
	return b
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.UintN(256))
	}
	return b
}

// floodUDP sends up to hostilePackets malformed packets to addr from a few
// sockets until deadline, reading (and dropping) what comes back so that
// the answers do not pile up; it returns how many it sent.
func floodUDP(t *testing.T, addr string, seed int64, deadline time.Time) int64 {
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	var sent int64
	conns := make([]net.Conn, 4)
	for i := range conns {
		c, err := net.Dial("udp", addr)
		if err != nil {
			t.Error(err)
			return sent
		}
		defer c.Close()
		go io.Copy(io.Discard, c)
		conns[i] = c
	}
	for sent < hostilePackets && time.Now().Before(deadline) {
		conns[sent%int64(len(conns))].Write(hostilePacket(rng, "hostile.example."))
		sent++
		if sent%200 == 0 {
			time.Sleep(2 * time.Millisecond) // about 50,000 a second at most
		}
	}
	return sent
}

// floodTCP opens up to hostileConns connections to addr until deadline,
// each sending garbage: a length prefix that announces more than follows,
// a malformed message in a frame, random bytes, or nothing at all for a
// while; it returns how many it opened.
func floodTCP(t *testing.T, addr string, seed int64, deadline time.Time) int64 {
	rng := rand.New(rand.NewPCG(uint64(seed), 11))
	var opened int64
	for opened < hostileConns && time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			continue // the server may be busy closing others: not a failure by itself
		}
		opened++
		c.SetDeadline(time.Now().Add(500 * time.Millisecond))
		switch rng.IntN(4) {
		case 0:
			c.Write([]byte{0xff, 0xff})
			c.Write(randBytes(rng, rng.IntN(100)))
		case 1:
			p := hostilePacket(rng, "hostile.example.")
			c.Write(binary.BigEndian.AppendUint16(nil, uint16(len(p))))
			c.Write(p)
			io.Copy(io.Discard, c)
		case 2:
			c.Write(randBytes(rng, rng.IntN(4000)))
		case 3:
			time.Sleep(100 * time.Millisecond)
		}
		c.Close()
	}
	return opened
}

// badBodies sends the API bad requests until deadline: bodies of the wrong
// type, broken or deeply nested JSON, bodies over the limits (streamed, not
// held), and records that do not parse. Each must be refused with a 4xx
// and a JSON error; it returns how many were sent.
func badBodies(t *testing.T, api harness.API, zone string, deadline time.Time) int64 {
	type req struct {
		method, path, ctype string
		body                func() io.Reader
	}
	str := func(s string) func() io.Reader { return func() io.Reader { return strings.NewReader(s) } }
	big := func(prefix string, n int64) func() io.Reader {
		return func() io.Reader {
			return io.MultiReader(strings.NewReader(prefix), io.LimitReader(repeatReader('a'), n))
		}
	}
	records := "/v1/zones/" + zone + "/records"
	reqs := []req{
		{"POST", records, "", str(`{"add":["x 60 IN A 192.0.2.1"]}`)},
		{"POST", records, "text/plain", str(`{"add":["x 60 IN A 192.0.2.1"]}`)},
		{"PUT", "/v1/zones/" + zone, "application/json", str("@ 60 IN SOA a b 1 2 3 4 5\n")},
		{"POST", records, "application/json", str(`{"add":["x 60 IN A 192.0.2.1"`)},
		{"POST", records, "application/json", str(strings.Repeat("[", 100000))},
		{"POST", records, "application/json", str(`{"add":["x 60 IN A 999.0.2.1"]}`)},
		{"POST", records, "application/json", str(`{"add":["x 60 IN RRSIG A 13 2 60 20300101000000 20200101000000 1 x. AAAA"]}`)},
		{"POST", records, "application/json", str("{\"add\":[\"\x00\xff\xfe\"]}")},
		{"POST", records, "application/json", big(`{"add":["`, 5<<20)},
		{"PUT", "/v1/zones/" + zone + "/../..", "text/dns", str("x")},
		{"PUT", "/v1/zones/bad..name", "text/dns", str("x")},
		{"PUT", "/v1/zones/new.hostile.example", "text/dns", str("$GENERATE 1-1000000 h$ A 192.0.2.1\n$GENERATE 1-1000000 g$ A 192.0.2.1\n")},
		{"PUT", "/v1/zones/new.hostile.example", "text/dns", big("$ORIGIN new.hostile.example.\n; ", 20<<20)},
	}
	client := &http.Client{Timeout: 30 * time.Second}
	var sent int64
	for i := 0; time.Now().Before(deadline) && i < 3*len(reqs); i++ {
		rq := reqs[i%len(reqs)]
		hr, err := http.NewRequest(rq.method, api.Base+rq.path, rq.body())
		if err != nil {
			t.Error(err)
			return sent
		}
		if rq.ctype != "" {
			hr.Header.Set("Content-Type", rq.ctype)
		}
		resp, err := client.Do(hr)
		sent++
		if err != nil {
			// A server may close a connection on a body over its limit
			// before it is all sent.
			continue
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode < 400 || resp.StatusCode >= 500 || !bytes.Contains(b, []byte(`"error"`)) {
			t.Errorf("%s %s%s (%s): expected a 4xx with a JSON error, got %d %s", rq.method, api.Base, rq.path, rq.ctype, resp.StatusCode, b)
		}
	}
	return sent
}

type repeatReader byte

func (r repeatReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}
