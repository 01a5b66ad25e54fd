package integration

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
	"github.com/craftdns/craftdns/internal/dnsdiff"
	"github.com/craftdns/craftdns/internal/faultnet"

	"github.com/miekg/dns"
)

// A sharded setup as Corefile.examples/sharded/ has it, on free ports: shards
// of craftstore members (one Raft group each, no seed) and craftroute
// routers in front of them, every process with its Corefile in the test's
// working directory.

// shardMember is one craftstore member of a shard.
type shardMember struct {
	name                  string // a1, b2, ...
	shard                 string
	dns, api, raft, ready int
	p                     *harness.Proc
}

func (m *shardMember) addr() string { return fmt.Sprintf("127.0.0.1:%d", m.dns) }
func (m *shardMember) client() harness.API {
	return harness.API{Base: fmt.Sprintf("http://127.0.0.1:%d", m.api)}
}

// routerSpec is what a router's craftroute block says beyond the shards.
type routerSpec struct {
	zones   []string // the server block's zones
	key     string   // name or zone
	timeout string
	downFor string
	probe   string
	// transfer adds the transfer plugin to the router's block: transfers
	// to anyone; notify, when set, adds it with transfers to loopback and
	// NOTIFY to these ports.
	transfer bool
	notify   []int
	// mapSeed adds shard_seed with a member of each shard: the router
	// agrees on the shard map with the others (issue 51), as every router
	// with shard_api does; noMap adds shard_map off: it routes by its
	// Corefile (a router of another key mode over the same shards).
	mapSeed bool
	noMap   bool
	// nameFilters, when set, is the router's name_filters (MiB; "0": off).
	nameFilters string
	// slow adds fast_path off: every query takes the router's slow path.
	slow bool
	// extra lines for the craftroute block (dnssec ...).
	extra string
}

// router is one craftroute process.
type router struct {
	name                   string
	spec                   routerSpec
	dns, api, metrics, rdy int
	p                      *harness.Proc
}

func (r *router) addr() string { return fmt.Sprintf("127.0.0.1:%d", r.dns) }
func (r *router) client() harness.API {
	return harness.API{Base: fmt.Sprintf("http://127.0.0.1:%d", r.api)}
}

// sharded is a running set of shards and routers.
type sharded struct {
	t       *testing.T
	wd      string
	shards  []string                  // shard names in order: a, b, ...
	members map[string][]*shardMember // shard → members
	routers []*router
	procs   []*harness.Proc // all of them, for logs
}

// memberCorefile is the Corefile of a shard member serving zones: the
// sharded example's, on the member's ports.
// With a faultnet, member m listens on its own Raft port and reaches each
// peer through the link m→peer. Shard b's members run in paged mode.
func memberCorefile(zones []string, m *shardMember, peers []*shardMember, fn *faultnet.Net) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s {\n    bind 127.0.0.1\n", serverKeys(zones, m.dns))
	b.WriteString("    tsig {\n        secrets Corefile.examples/keys/update.key\n        require_opcode UPDATE\n    }\n")
	fmt.Fprintf(&b, "    craftstore {\n        id %s\n        cluster craftdns-%s\n        data data/%s\n", m.name[1:], m.shard, m.name)
	if fn != nil {
		fmt.Fprintf(&b, "        raft 127.0.0.1:%d\n", m.raft)
	}
	for i, p := range peers {
		addr := fmt.Sprintf("127.0.0.1:%d", p.raft)
		if fn != nil && p != m {
			addr = fn.Get(m.name, p.name).Addr()
		}
		fmt.Fprintf(&b, "        peer %d %s\n", i+1, addr)
	}
	if m.shard == "b" {
		// Shard b reads its records from the file (paged mode, a small
		// cache): every sharded test also checks a router over paged
		// shards answers as one server.
		b.WriteString("        memory paged 64\n")
	}
	fmt.Fprintf(&b, "        api 127.0.0.1:%d\n        router_key %s\n        allow update. * *\n    }\n", m.api, routerKey)
	fmt.Fprintf(&b, "    ready 127.0.0.1:%d {\n        monitor continuously\n    }\n    errors\n}\n", m.ready)
	return b.String()
}

// routerCorefile is router.Corefile of the sharded example on r's ports.
func (s *sharded) routerCorefile(r *router) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s {\n    bind 127.0.0.1\n", serverKeys(r.spec.zones, r.dns))
	// As the example: craftroute refuses unsigned UPDATEs itself, with an
	// Extended DNS Error.
	b.WriteString("    tsig {\n        secrets Corefile.examples/keys/update.key\n    }\n")
	if r.spec.transfer || len(r.spec.notify) > 0 {
		b.WriteString("    transfer {\n        to")
		if r.spec.transfer {
			b.WriteString(" *")
		}
		for _, p := range r.spec.notify {
			fmt.Fprintf(&b, " 127.0.0.1:%d", p)
		}
		b.WriteString("\n    }\n")
	}
	b.WriteString("    craftroute {\n")
	for _, sh := range s.shards {
		var dnsAddrs, apis []string
		for _, m := range s.members[sh] {
			dnsAddrs = append(dnsAddrs, m.addr())
			apis = append(apis, m.client().Base)
		}
		fmt.Fprintf(&b, "        shard %s %s\n", sh, strings.Join(dnsAddrs, " "))
		fmt.Fprintf(&b, "        shard_api %s %s\n", sh, strings.Join(apis, " "))
	}
	if r.spec.mapSeed {
		var seeds []string
		for _, sh := range s.shards {
			seeds = append(seeds, s.members[sh][0].client().Base)
		}
		fmt.Fprintf(&b, "        shard_seed %s\n", strings.Join(seeds, " "))
	}
	if r.spec.noMap {
		b.WriteString("        shard_map off\n")
	}
	fmt.Fprintf(&b, "        key %s\n", r.spec.key)
	if r.spec.slow {
		b.WriteString("        fast_path off\n")
	}
	for _, kv := range [][2]string{{"timeout", r.spec.timeout}, {"down_for", r.spec.downFor}, {"probe", r.spec.probe}, {"name_filters", r.spec.nameFilters}} {
		if kv[1] != "" {
			fmt.Fprintf(&b, "        %s %s\n", kv[0], kv[1])
		}
	}
	b.WriteString(r.spec.extra)
	b.WriteString("        tsig Corefile.examples/keys/update.key\n")
	fmt.Fprintf(&b, "        router_key %s\n", routerKey)
	fmt.Fprintf(&b, "        api 127.0.0.1:%d\n    }\n", r.api)
	fmt.Fprintf(&b, "    prometheus 127.0.0.1:%d\n    ready 127.0.0.1:%d {\n        monitor continuously\n    }\n    errors\n}\n", r.metrics, r.rdy)
	return b.String()
}

// routerKey is the router_key of the tests' routers and shard members.
const routerKey = "integration-router-key-0123456789abcdef"

// serverKeys returns "z1:port z2:port".
func serverKeys(zones []string, port int) string {
	keys := make([]string, len(zones))
	for i, z := range zones {
		keys[i] = fmt.Sprintf("%s:%d", z, port)
	}
	return strings.Join(keys, " ")
}

// startSharded starts nshards shards of size members each, serving
// memberZones, and one router per spec, and waits until all are ready.
func startSharded(t *testing.T, wd string, nshards, size int, memberZones []string, specs ...routerSpec) *sharded {
	t.Helper()
	return startShardedNet(t, wd, nshards, size, memberZones, nil, specs...)
}

// startShardedNet is startSharded whose members, when fn is not nil, reach
// each other through links of fn named after them (a1→a2, ...).
func startShardedNet(t *testing.T, wd string, nshards, size int, memberZones []string, fn *faultnet.Net, specs ...routerSpec) *sharded {
	t.Helper()
	s := &sharded{t: t, wd: wd, members: map[string][]*shardMember{}}
	for i := 0; i < nshards; i++ {
		sh := string(rune('a' + i))
		s.shards = append(s.shards, sh)
		for j := 1; j <= size; j++ {
			s.members[sh] = append(s.members[sh], &shardMember{name: fmt.Sprintf("%s%d", sh, j), shard: sh,
				dns: harness.ListenPort(t), api: harness.ListenPort(t), raft: harness.ListenPort(t), ready: harness.ListenPort(t)})
		}
	}
	if fn != nil {
		for _, sh := range s.shards {
			for _, from := range s.members[sh] {
				for _, to := range s.members[sh] {
					if from != to {
						if _, err := fn.Link(from.name, to.name, fmt.Sprintf("127.0.0.1:%d", to.raft)); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
		}
	}
	for _, sh := range s.shards {
		for _, m := range s.members[sh] {
			writeFile(t, filepath.Join(wd, m.name+".Corefile"), memberCorefile(memberZones, m, s.members[sh], fn))
			m.p = harness.Start(t, m.name, wd, m.name+".Corefile")
			s.procs = append(s.procs, m.p)
		}
	}
	for i, spec := range specs {
		r := &router{name: fmt.Sprintf("router%d", i+1), spec: spec, dns: harness.ListenPort(t), api: harness.ListenPort(t), metrics: harness.ListenPort(t), rdy: harness.ListenPort(t)}
		writeFile(t, filepath.Join(wd, r.name+".Corefile"), s.routerCorefile(r))
		r.p = harness.Start(t, r.name, wd, r.name+".Corefile")
		s.routers = append(s.routers, r)
		s.procs = append(s.procs, r.p)
	}
	for _, sh := range s.shards {
		for _, m := range s.members[sh] {
			harness.WaitReady(t, fmt.Sprintf("http://127.0.0.1:%d/ready", m.ready), s.procs...)
		}
	}
	for _, r := range s.routers {
		harness.WaitReady(t, fmt.Sprintf("http://127.0.0.1:%d/ready", r.rdy), s.procs...)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, r := range s.routers {
				t.Logf("%s log (last 4 KiB):\n%s", r.name, tail(r.p.Logs(), 4096))
			}
		}
	})
	return s
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// zoneRecords returns the record count of zone on a member's API, -1 when
// the member does not list it.
func zoneRecords(a harness.API, zone string) (int, error) {
	var zones []struct {
		Zone    string
		Records int
	}
	code, err := a.Do("GET", "/v1/zones", nil, &zones)
	if err != nil || code != http.StatusOK {
		return 0, fmt.Errorf("GET /v1/zones: %d %v", code, err)
	}
	for _, z := range zones {
		if strings.EqualFold(dns.Fqdn(z.Zone), dns.Fqdn(zone)) {
			return z.Records, nil
		}
	}
	return -1, nil
}

// shardRecords waits until every member of each shard lists the same record
// count for zone and returns it per shard (-1: the shard lacks the zone).
func (s *sharded) shardRecords(zone string) map[string]int {
	s.t.Helper()
	counts := map[string]int{}
	for _, sh := range s.shards {
		harness.Eventually(s.t, "the members of shard "+sh+" to agree on "+zone, 20*time.Second, func() bool {
			n0 := 0
			for i, m := range s.members[sh] {
				n, err := zoneRecords(m.client(), zone)
				if err != nil || (i > 0 && n != n0) {
					return false
				}
				n0 = n
			}
			counts[sh] = n0
			return true
		})
	}
	return counts
}

// membersSay describes the rcode and answer count of every live member's
// answer for name/qtype.
func (s *sharded) membersSay(t *testing.T, name string, qtype uint16) string {
	var out []string
	for _, sh := range s.shards {
		for _, m := range s.members[sh] {
			r, err := harness.Query(m.addr(), name, qtype)
			switch {
			case err != nil:
				out = append(out, m.name+" down")
			default:
				out = append(out, fmt.Sprintf("%s %s/%d", m.name, dns.RcodeToString[r.Rcode], len(r.Answer)))
			}
		}
	}
	return strings.Join(out, ", ")
}

// putZone creates zone through a's PUT /v1/zones/{zone}.
func putZone(t *testing.T, a harness.API, zone, text string) {
	t.Helper()
	var out string
	code, err := a.Do("PUT", "/v1/zones/"+zone, text, &out)
	if err != nil || code != http.StatusOK {
		t.Fatalf("expected 200 from PUT /v1/zones/%s at %s, got %d %v %s", zone, a.Base, code, err, tail(out, 500))
	}
}

// startSingle starts one unsharded craftstore member serving zones and
// returns its DNS address and API.
func startSingle(t *testing.T, wd string, zones []string) (string, harness.API) {
	t.Helper()
	dnsPort, apiPort, readyPort := harness.ListenPort(t), harness.ListenPort(t), harness.ListenPort(t)
	corefile := fmt.Sprintf(`%s {
    bind 127.0.0.1
    craftstore {
        data data/single
        api 127.0.0.1:%d
    }
    ready 127.0.0.1:%d
    errors
}
`, serverKeys(zones, dnsPort), apiPort, readyPort)
	writeFile(t, filepath.Join(wd, "single.Corefile"), corefile)
	p := harness.Start(t, "single", wd, "single.Corefile")
	harness.WaitReady(t, fmt.Sprintf("http://127.0.0.1:%d/ready", readyPort), p)
	return fmt.Sprintf("127.0.0.1:%d", dnsPort), harness.API{Base: fmt.Sprintf("http://127.0.0.1:%d", apiPort)}
}

// sampleQueries keeps every query about the generator's fixed names and
// those about one random name (rN, and the names below it) in every.
func sampleQueries(qs []dnsdiff.Query, every int) []dnsdiff.Query {
	rnd := regexp.MustCompile(`(?i)(^|\.)r(\d+)\.`)
	var out []dnsdiff.Query
	for _, q := range qs {
		m := rnd.FindStringSubmatch(q.Name)
		if m == nil {
			out = append(out, q)
			continue
		}
		if n, _ := strconv.Atoi(m[2]); n%every == 0 {
			out = append(out, q)
		}
	}
	return out
}

// exchangeFull asks q at addr over UDP, TCP when truncated, retrying twice.
func exchangeFull(addr string, q dnsdiff.Query) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(q.Name, q.Type)
	m.RecursionDesired = false
	m.SetEdns0(4096, false)
	var err error
	for _, network := range []string{"udp", "tcp"} {
		c := &dns.Client{Net: network, UDPSize: 4096, Timeout: 2 * time.Second}
		var r *dns.Msg
		for try := 0; try < 3; try++ {
			if r, _, err = c.Exchange(m, addr); err == nil {
				break
			}
		}
		if err != nil {
			return nil, err
		}
		if !r.Truncated {
			return r, nil
		}
	}
	return nil, fmt.Errorf("truncated over TCP")
}

// shardedDiff counts what compareWithRef found.
type shardedDiff struct {
	differ  int            // queries whose answers differ beyond SOA serials
	failed  int            // of them, those the router answered SERVFAIL or not at all
	serials int            // queries whose answers differ only in SOA serials
	kinds   map[string]int // what differs ("rcode, answer") → queries
	report  []string       // the first few of each kind in full
}

// String summarizes the differences: counts by kind, then examples.
func (d *shardedDiff) String() string {
	kinds := make([]string, 0, len(d.kinds))
	for k, n := range d.kinds {
		kinds = append(kinds, fmt.Sprintf("%d: %s", n, k))
	}
	slices.Sort(kinds)
	return fmt.Sprintf("by what differs:\n\t%s\nexamples:\n\n%s", strings.Join(kinds, "\n\t"), strings.Join(d.report, "\n"))
}

// compareWithRef asks every query of ref and of each of addrs and compares
// rcode, AA and the answer, authority and additional sections (OPT left
// out) as sets of RRs, TTLs included. With ignoreSerial, SOA RRs compare
// without their serial (the shards of a zone split by name each bump their
// own), and such differences are only counted.
func compareWithRef(ref string, addrs []string, queries []dnsdiff.Query, ignoreSerial bool) map[string]*shardedDiff {
	type job struct {
		q    dnsdiff.Query
		addr string
	}
	res := map[string]*shardedDiff{}
	for _, a := range addrs {
		res[a] = &shardedDiff{kinds: map[string]int{}}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan dnsdiff.Query)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for q := range next {
				want, errW := exchangeFull(ref, q)
				for _, a := range addrs {
					got, errG := exchangeFull(a, q)
					why, d, serialOnly := diffMsg(want, errW, got, errG, ignoreSerial)
					mu.Lock()
					r := res[a]
					switch {
					case why != "":
						r.differ++
						if errG != nil || got.Rcode == dns.RcodeServerFailure {
							r.failed++
						}
						r.kinds[why]++
						if r.kinds[why] <= 3 && len(r.report) < 20 {
							r.report = append(r.report, fmt.Sprintf(";; %s: %s differ\n%s", q, why, d))
						}
					case serialOnly:
						r.serials++
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, q := range queries {
		next <- q
	}
	close(next)
	wg.Wait()
	return res
}

// diffMsg says what differs between want and got ("" if nothing) and how,
// and reports whether they differ in SOA serials only.
func diffMsg(want *dns.Msg, errW error, got *dns.Msg, errG error, ignoreSerial bool) (why, detail string, serialOnly bool) {
	if errW != nil || errG != nil {
		return "error", fmt.Sprintf("reference: %v, router: %v\n", errOrOK(errW), errOrOK(errG)), false
	}
	var whys []string
	if want.Rcode != got.Rcode {
		whys = append(whys, "rcode")
	}
	if want.Authoritative != got.Authoritative {
		whys = append(whys, "AA")
	}
	for _, s := range []struct {
		name string
		a, b []dns.RR
	}{{"answer", want.Answer, got.Answer}, {"authority", want.Ns, got.Ns}, {"additional", noOPT(want.Extra), noOPT(got.Extra)}} {
		if sameRRs(s.a, s.b, false) {
			continue
		}
		if ignoreSerial && sameRRs(s.a, s.b, true) {
			serialOnly = true
			continue
		}
		whys = append(whys, s.name)
	}
	if len(whys) == 0 {
		return "", "", serialOnly
	}
	return strings.Join(whys, ", "), fmt.Sprintf("-- reference:\n%s-- router:\n%s", msgSummary(want), msgSummary(got)), false
}

func errOrOK(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

func noOPT(rrs []dns.RR) []dns.RR {
	var out []dns.RR
	for _, rr := range rrs {
		if rr.Header().Rrtype != dns.TypeOPT {
			out = append(out, rr)
		}
	}
	return out
}

// sameRRs reports whether a and b hold the same RRs in any order, names
// case-insensitive, TTLs equal; SOA serials are ignored with noSerial.
func sameRRs(a, b []dns.RR, noSerial bool) bool {
	if noSerial {
		a, b = zeroSerials(a), zeroSerials(b)
	}
	return dnsdiff.SameSet(a, b)
}

// zeroSerials returns rrs with copies of its SOA records whose serial is 0.
func zeroSerials(rrs []dns.RR) []dns.RR {
	out := make([]dns.RR, len(rrs))
	for i, rr := range rrs {
		if soa, ok := rr.(*dns.SOA); ok {
			c := dns.Copy(soa).(*dns.SOA)
			c.Serial = 0
			rr = c
		}
		out[i] = rr
	}
	return out
}

func msgSummary(m *dns.Msg) string {
	var b strings.Builder
	fmt.Fprintf(&b, "   rcode %s, aa %t\n", dns.RcodeToString[m.Rcode], m.Authoritative)
	for _, s := range []struct {
		name string
		rrs  []dns.RR
	}{{"answer", m.Answer}, {"authority", m.Ns}, {"additional", noOPT(m.Extra)}} {
		lines := make([]string, 0, len(s.rrs))
		for _, rr := range s.rrs {
			lines = append(lines, rr.String())
		}
		slices.Sort(lines)
		for _, l := range lines {
			fmt.Fprintf(&b, "   %s\t%s\n", s.name, l)
		}
	}
	return b.String()
}

// smallZone is a zone of n host names hN with an A record each.
func smallZone(origin string, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "$ORIGIN %s\n$TTL 300\n@ SOA ns1 hostmaster 1 7200 3600 1209600 60\n@ NS ns1\nns1 A 192.0.2.53\n", origin)
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "h%d A 198.51.100.%d\n", i, i%256)
	}
	return b.String()
}

// routerMetrics reads a router's craftroute metrics: name → label text →
// value.
func routerMetrics(t *testing.T, r *router) map[string]map[string]float64 {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", r.metrics))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "coredns_craftroute_") {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		name, labels := line[:sp], ""
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name, labels = name[:i], name[i:]
		}
		if out[name] == nil {
			out[name] = map[string]float64{}
		}
		out[name][labels] = v
	}
	return out
}

// metricSum adds the series of name whose labels hold every one of want
// (`key="value"`).
func metricSum(t *testing.T, m map[string]map[string]float64, name string, want ...string) float64 {
	t.Helper()
	series, ok := m[name]
	if !ok {
		names := make([]string, 0, len(m))
		for n := range m {
			names = append(names, n)
		}
		slices.Sort(names)
		t.Fatalf("expected the metric %s, the router has %v", name, names)
	}
	sum := 0.0
next:
	for labels, v := range series {
		for _, w := range want {
			if !strings.Contains(labels, w) {
				continue next
			}
		}
		sum += v
	}
	return sum
}
