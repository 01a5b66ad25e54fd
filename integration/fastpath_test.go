package integration

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"

	"github.com/miekg/dns"
)

// TestFastPathEqualsSlowPath is the forwarding fast path's differential
// test (craftroute's fast.go): two routers in front of the same two shards
// (shard b paged), one with the fast path (the default) and one with
// fast_path off, are asked the generator's queries (bench/zonegen: a
// company's zone, 10% missing names) by clients of several kinds: no EDNS,
// EDNS with and without DO, a cookie, a small buffer, an ECS option, TCP,
// and a mixed-case name; with two long RRsets (2 and 5 KB: TCP clients
// get them relayed, over TCP to the member for the longer). Every answer must be the same bytes from both. The
// fast router must have relayed most of them (its fast_relayed_total), the
// slow one none.
func TestFastPathEqualsSlowPath(t *testing.T) {
	wd := harness.Workdir(t)
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal("go is needed to run bench/zonegen")
	}
	zoneFile, queryFile := filepath.Join(wd, "zone"), filepath.Join(wd, "queries")
	gen := exec.Command(goBin, "run", filepath.Join(harness.Repo, "bench/zonegen"), "-n", "3000", "-zone", zoneFile,
		"-queries", queryFile, "-nqueries", "1200", "-missing", "0.1", "-seed", "7")
	gen.Dir = harness.Repo
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("zonegen: %v\n%s", err, out)
	}
	zone, err := os.ReadFile(zoneFile)
	if err != nil {
		t.Fatal(err)
	}
	// Two long RRsets: 2 KB (over UDP to a member, beyond 1,220 bytes)
	// and 5 KB (truncated over UDP, asked over TCP).
	var big strings.Builder
	big.Write(zone)
	for i := range 300 {
		if i < 120 {
			fmt.Fprintf(&big, "big.example.org. 300 IN A 198.51.100.%d\n", i)
		}
		fmt.Fprintf(&big, "huge.example.org. 300 IN A 203.0.%d.%d\n", i/250, i%250)
	}
	zone = []byte(big.String())
	zones := []string{"example.org."}
	s := startSharded(t, wd, 2, 1, zones,
		routerSpec{zones: zones, key: "name"},
		routerSpec{zones: zones, key: "name", slow: true})
	fast, slow := s.routers[0], s.routers[1]
	putZone(t, fast.client(), "example.org", string(zone))
	for _, r := range s.routers {
		harness.Eventually(t, r.name+" answers from the zone", 20*time.Second, func() bool {
			m, err := harness.Query(r.addr(), "example.org.", dns.TypeSOA)
			return err == nil && m.Rcode == dns.RcodeSuccess && len(m.Answer) == 1
		})
	}

	type question struct {
		name  string
		qtype uint16
	}
	var questions []question
	f, err := os.Open(queryFile)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 2 {
			continue
		}
		qt, ok := dns.StringToType[fields[1]]
		if !ok {
			t.Fatalf("query file line %q: unknown type", sc.Text())
		}
		questions = append(questions, question{dns.Fqdn(fields[0]), qt})
	}
	f.Close()
	if len(questions) < 1000 {
		t.Fatalf("only %d queries generated", len(questions))
	}
	// The apex, the delegation and its glue, a CNAME to a missing name.
	questions = append(questions, question{"example.org.", dns.TypeSOA}, question{"example.org.", dns.TypeNS},
		question{"example.org.", dns.TypeMX}, question{"host.sub.example.org.", dns.TypeA},
		question{"example.org.", dns.TypeANY}, question{"nope.example.org.", dns.TypeAAAA},
		question{"big.example.org.", dns.TypeA}, question{"huge.example.org.", dns.TypeA})

	type client struct {
		name string
		tcp  bool
		edns func(m *dns.Msg)
	}
	clients := []client{
		{"no EDNS", false, func(*dns.Msg) {}},
		{"EDNS 1232", false, func(m *dns.Msg) { m.SetEdns0(1232, false) }},
		{"EDNS 4096 DO cookie", false, func(m *dns.Msg) {
			m.SetEdns0(4096, true)
			o := m.IsEdns0()
			o.Option = append(o.Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0123456789abcdef"})
		}},
		{"EDNS 512", false, func(m *dns.Msg) { m.SetEdns0(512, false) }},
		{"ECS", false, func(m *dns.Msg) {
			m.SetEdns0(1232, false)
			o := m.IsEdns0()
			o.Option = append(o.Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: net.IPv4(192, 0, 2, 0).To4()})
		}},
		{"TCP EDNS 1232", true, func(m *dns.Msg) { m.SetEdns0(1232, false) }},
		{"TCP no EDNS", true, func(*dns.Msg) {}},
	}
	compared := 0
	for i, q := range questions {
		name := q.name
		if i%7 == 3 {
			name = strings.ToUpper(name[:len(name)/2]) + name[len(name)/2:] // DNS 0x20
		}
		for _, cl := range clients {
			m := new(dns.Msg)
			m.SetQuestion(name, q.qtype)
			m.RecursionDesired = i%2 == 0
			m.Id = uint16(i*len(clients) + compared%len(clients))
			cl.edns(m)
			wire, err := m.Pack()
			if err != nil {
				t.Fatal(err)
			}
			a, err := rawExchange(fast.addr(), wire, cl.tcp)
			if err != nil {
				t.Fatalf("%s %s (%s) to the fast router: %v", name, dns.TypeToString[q.qtype], cl.name, err)
			}
			b, err := rawExchange(slow.addr(), wire, cl.tcp)
			if err != nil {
				t.Fatalf("%s %s (%s) to the slow router: %v", name, dns.TypeToString[q.qtype], cl.name, err)
			}
			if !bytes.Equal(a, b) {
				ma, mb := new(dns.Msg), new(dns.Msg)
				ea, eb := ma.Unpack(a), mb.Unpack(b)
				t.Fatalf("%s %s (%s): the routers' answers differ\nfast (%d bytes, %v):\n%v\nslow (%d bytes, %v):\n%v\nfast % x\nslow % x",
					name, dns.TypeToString[q.qtype], cl.name, len(a), ea, ma, len(b), eb, mb, a, b)
			}
			compared++
		}
	}
	relayed, declined := fastCounts(t, fast), fastCounts(t, slow)
	t.Logf("%d answers compared; the fast router relayed %d queries and declined %d", compared, relayed[0], relayed[1])
	if declined[0] != 0 {
		t.Errorf("the router with fast_path off relayed %d queries", declined[0])
	}
	// Of the 7 kinds of client, ECS always takes the slow path; of the
	// questions, missing names, CNAMEs, SOA and NS at the apex, NODATA and
	// referrals do: more than a third of the queries relayed is the fast
	// path at work.
	if relayed[0] < compared/3 {
		t.Errorf("the fast router relayed %d of %d queries", relayed[0], compared)
	}
}

// rawExchange sends wire to addr (UDP, or TCP with its length prefix) and
// returns the answer's bytes as they came.
func rawExchange(addr string, wire []byte, tcp bool) ([]byte, error) {
	network := "udp"
	if tcp {
		network = "tcp"
	}
	c, err := net.DialTimeout(network, addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	if !tcp {
		if _, err := c.Write(wire); err != nil {
			return nil, err
		}
		buf := make([]byte, 65535)
		n, err := c.Read(buf)
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
	if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(wire))), wire...)); err != nil {
		return nil, err
	}
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return nil, err
	}
	buf := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(c, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// fastCounts returns a router's fast_relayed_total and fast_declined_total.
func fastCounts(t *testing.T, r *router) [2]int {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", r.metrics))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out [2]int
	for i, name := range []string{"fast_relayed_total", "fast_declined_total"} {
		if m := regexp.MustCompile(`(?m)^coredns_craftroute_` + name + ` (\d+)$`).FindSubmatch(body); m != nil {
			out[i], _ = strconv.Atoi(string(m[1]))
		}
	}
	return out
}
