package integration

import (
	"fmt"
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
	"github.com/craftdns/craftdns/internal/dnsdiff"

	"github.com/miekg/dns"
)

// xfrMember is one member of the group TestTransferToNSD starts.
type xfrMember struct {
	dns, api, raft, ready int
	p                     *harness.Proc
}

func (m xfrMember) addr() string { return fmt.Sprintf("127.0.0.1:%d", m.dns) }
func (m xfrMember) client() harness.API {
	return harness.API{Base: fmt.Sprintf("http://127.0.0.1:%d", m.api)}
}

// startXFRGroup starts three members serving origin, each with the
// transfer plugin allowing 127.0.0.1 and sending NOTIFY to notifyPort.
func startXFRGroup(t *testing.T, origin string, notifyPort int) []xfrMember {
	t.Helper()
	wd := t.TempDir()
	ms := make([]xfrMember, 3)
	var peers strings.Builder
	for i := range ms {
		ms[i] = xfrMember{dns: harness.ListenPort(t), api: harness.ListenPort(t), raft: harness.ListenPort(t), ready: harness.ListenPort(t)}
		fmt.Fprintf(&peers, "        peer %d 127.0.0.1:%d\n", i+1, ms[i].raft)
	}
	for i := range ms {
		corefile := fmt.Sprintf(`%s:%d {
    bind 127.0.0.1
    transfer {
        to 127.0.0.1:%d
    }
    craftstore {
        id %d
        data data/m%d
%s        api 127.0.0.1:%d
        journal 100
    }
    ready 127.0.0.1:%d
    log
}
`, origin, ms[i].dns, notifyPort, i+1, i+1, peers.String(), ms[i].api, ms[i].ready)
		name := fmt.Sprintf("m%d", i+1)
		if err := os.WriteFile(filepath.Join(wd, name+".Corefile"), []byte(corefile), 0o644); err != nil {
			t.Fatal(err)
		}
		ms[i].p = harness.Start(t, name, wd, name+".Corefile")
	}
	for _, m := range ms {
		harness.WaitReady(t, fmt.Sprintf("http://127.0.0.1:%d/ready", m.ready), ms[0].p, ms[1].p, ms[2].p)
	}
	return ms
}

// soaSerial asks addr for origin's SOA serial; 0 when there is none.
func soaSerial(addr, origin string) uint32 {
	r, err := harness.Query(addr, origin, dns.TypeSOA)
	if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
		return 0
	}
	if soa, ok := r.Answer[0].(*dns.SOA); ok {
		return soa.Serial
	}
	return 0
}

// TestTransferToNSD makes NSD a secondary of member 1 of a three-member
// group, changes the zone through all members and checks that NSD follows
// by NOTIFY (the SOA refresh is two hours) and IXFR from member 1's
// replicated journal, answering like craftstore afterwards. It also runs
// dig AXFR and IXFR against the members.
func TestTransferToNSD(t *testing.T) {
	const origin = "xfr.example."
	text, queries := dnsdiff.GenerateZone(origin, 11, 100)
	nsdPort := harness.ListenPort(t) // below the ephemeral ports: no outgoing socket takes it meanwhile
	ms := startXFRGroup(t, origin, nsdPort)

	var put struct {
		Serial  uint32
		Records int
	}
	if code, err := ms[0].client().Do("PUT", "/v1/zones/"+origin, text, &put); err != nil || code != http.StatusOK {
		t.Fatalf("expected 200 loading the zone, got %d %v", code, err)
	}
	for _, m := range ms {
		harness.Eventually(t, "the zone on "+m.addr(), 20*time.Second, func() bool { return soaSerial(m.addr(), origin) == put.Serial })
	}

	// NSD takes the whole zone by AXFR and answers like craftstore.
	sec := dnsdiff.StartNSDSecondary(t, origin, ms[0].addr(), nsdPort)
	if got := soaSerial(sec.Addr, origin); got != put.Serial {
		t.Fatalf("expected NSD at serial %d, got %d", put.Serial, got)
	}
	dnsdiff.Compare(t, sec.Addr, ms[0].addr(), queries)

	// Two bursts of changes through every member.
	bursts := [][]struct {
		via  int
		body string
	}{{
		{1, `{"add":["xfr-a 300 IN A 192.0.2.1","xfr-a 300 IN AAAA 2001:db8::1"]}`},
		{2, `{"add":["xfr-b 60 IN TXT \"hello world\"","*.xfr-wild 300 IN A 192.0.2.2"]}`},
		{1, `{"delete":[{"name":"xfr-a","type":"AAAA"}],"add":["xfr-a 600 IN A 192.0.2.3"]}`},
	}, {
		{0, `{"add":["xfr-c 300 IN CNAME xfr-a"]}`},
		{2, `{"delete":[{"name":"xfr-b"}]}`},
		{1, `{"add":["xfr-d 300 IN MX 10 xfr-a","@ 900 IN NS ns9.example.net."]}`},
		{2, `{"delete":["xfr-a.xfr.example. 600 IN A 192.0.2.1"]}`},
	}}
	serial := put.Serial
	for i, burst := range bursts {
		for _, c := range burst {
			var res struct{ Serial uint32 }
			if code, err := ms[c.via].client().Do("POST", "/v1/zones/"+origin+"/records", c.body, &res); err != nil || code != http.StatusOK {
				t.Fatalf("expected 200 for %s through member %d, got %d %v", c.body, c.via+1, code, err)
			}
			serial = res.Serial
		}
		harness.Eventually(t, fmt.Sprintf("NSD at serial %d after burst %d", serial, i+1), 30*time.Second, func() bool {
			return soaSerial(sec.Addr, origin) == serial
		})
	}

	changed := append([]dnsdiff.Query(nil), queries...)
	for _, name := range []string{"xfr-a", "xfr-b", "xfr-c", "xfr-d", "xfr-wild", "foo.xfr-wild", "@"} {
		for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeTXT, dns.TypeCNAME, dns.TypeMX, dns.TypeNS, dns.TypeSOA} {
			n := origin
			if name != "@" {
				n = name + "." + origin
			}
			changed = append(changed, dnsdiff.Query{Name: n, Type: qt})
		}
	}
	for _, m := range ms {
		dnsdiff.Compare(t, sec.Addr, m.addr(), changed)
	}

	// NSD was notified and took increments: after the first transfer (the
	// whole zone) member 1 sent transfers smaller than the zone. NSD 4.6
	// may itself ask for AXFR again when several increments land in one of
	// its reloads ("soa serial ... update failed, restarting transfer"), so
	// not every later transfer has to be incremental.
	nsdLog := sec.Log()
	if !strings.Contains(nsdLog, "notify for "+origin+" from 127.0.0.1") {
		t.Errorf("expected NSD to log NOTIFYs, log:\n%s", nsdLog)
	}
	if strings.Contains(nsdLog, "Failed to apply IXFR cleanly") || strings.Contains(nsdLog, "bad transfer") {
		t.Errorf("expected clean increments, NSD log:\n%s", nsdLog)
	}
	var sizes []int
	for _, m := range regexp.MustCompile(`Outgoing transfer of (\d+) records of zone "`+regexp.QuoteMeta(origin)+`"`).FindAllStringSubmatch(ms[0].p.Logs(), -1) {
		n, _ := strconv.Atoi(m[1])
		sizes = append(sizes, n)
	}
	incremental := 0
	for i, n := range sizes {
		if i == 0 && n != put.Records+1 {
			t.Errorf("expected the first transfer to be the whole zone (%d records), got %d", put.Records+1, n)
		}
		if i > 0 && n < put.Records/2 {
			incremental++
		}
	}
	t.Logf("member 1 sent NSD transfers of %v records; %d incremental", sizes, incremental)
	if incremental == 0 {
		t.Errorf("expected IXFR transfers after the first, got transfers of %v records; NSD log:\n%s", sizes, nsdLog)
	}

	harness.RequireTool(t, "dig")
	// dig IXFR against member 3: the changes since the first serial.
	ixfr := digXFR(t, ms[2].dns, origin, fmt.Sprintf("IXFR=%d", put.Serial))
	if len(ixfr) < 4 || soaOf(ixfr[0]) != serial || soaOf(ixfr[1]) != put.Serial || soaOf(ixfr[len(ixfr)-1]) != serial {
		t.Errorf("expected an incremental transfer from %d to %d, got %v", put.Serial, serial, ixfr)
	}
	// dig AXFR against member 2: SOA first and last, every record.
	var zoneText string
	if code, err := ms[1].client().Do("GET", "/v1/zones/"+origin, nil, &zoneText); err != nil || code != http.StatusOK {
		t.Fatalf("expected the zone text, got %d %v", code, err)
	}
	axfr := digXFR(t, ms[1].dns, origin, "AXFR")
	records := strings.Count(zoneText, "\n")
	if len(axfr) != records+1 || soaOf(axfr[0]) != serial || soaOf(axfr[len(axfr)-1]) != serial {
		t.Errorf("expected AXFR of %d records framed by SOA %d, got %d records: first %v", records+1, serial, len(axfr), axfr[:min(3, len(axfr))])
	}
}

// digXFR runs dig for a zone transfer against 127.0.0.1:port and returns
// the records it printed.
func digXFR(t *testing.T, port int, origin, kind string) []dns.RR {
	t.Helper()
	out, err := exec.Command(harness.RequireTool(t, "dig"), "@127.0.0.1", "-p", strconv.Itoa(port), "+tries=1", "+time=10", origin, kind).CombinedOutput()
	if err != nil {
		t.Fatalf("dig %s: %v\n%s", kind, err, out)
	}
	var rrs []dns.RR
	zp := dns.NewZoneParser(strings.NewReader(string(out)), origin, "")
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		rrs = append(rrs, rr)
	}
	if err := zp.Err(); err != nil {
		t.Fatalf("parsing dig's output: %v\n%s", err, out)
	}
	return rrs
}

// soaOf returns the serial of rr if it is a SOA record, else 0.
func soaOf(rr dns.RR) uint32 {
	if soa, ok := rr.(*dns.SOA); ok {
		return soa.Serial
	}
	return 0
}
