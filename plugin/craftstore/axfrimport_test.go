package craftstore

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/craftdns/craftdns/internal/dnsdiff"

	"github.com/miekg/dns"
)

const (
	xfrKey    = "xfr.example."
	xfrSecret = "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTEyMzQ=" // a test secret
)

// startPrimary serves AXFR of zone text on loopback TCP, like BIND or Knot
// would; with signed set it requires the TSIG key xfrKey.
func startPrimary(t *testing.T, origin, text string, signed bool) string {
	t.Helper()
	rrs := dnsdiff.ParseZone(t, origin, text)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{Listener: ln, TsigSecret: map[string]string{xfrKey: xfrSecret},
		Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
			if signed && (r.IsTsig() == nil || w.TsigStatus() != nil) {
				m := new(dns.Msg)
				m.SetRcode(r, dns.RcodeRefused)
				w.WriteMsg(m)
				return
			}
			ch := make(chan *dns.Envelope)
			go func() {
				// The SOA first and last; more than one message.
				ch <- &dns.Envelope{RR: rrs[:1]}
				ch <- &dns.Envelope{RR: append(append([]dns.RR{}, rrs[1:]...), rrs[0])}
				close(ch)
			}()
			tr := new(dns.Transfer)
			tr.Out(w, r, ch)
		})}
	go srv.ActivateAndServe()
	t.Cleanup(func() { srv.Shutdown() })
	return ln.Addr().String()
}

func TestAXFRImport(t *testing.T) {
	a, rep := newAPI(t, "")
	open := startPrimary(t, "example.org.", apiZone, false)
	signed := startPrimary(t, "example.org.", apiZone, true)
	broken := startPrimary(t, "example.org.", "$ORIGIN example.org.\n@ 300 IN SOA ns1 h 1 2 3 4 5\nwww 300 IN A 192.0.2.1\n", false)
	dead := freeTCP(t)

	tests := []struct {
		body     string
		wantCode int
		wantText string
	}{
		{`{"primary":"` + open + `"}`, 200, `"records":4`},
		{`{"primary":"` + signed + `","key":"xfr.example","secret":"` + xfrSecret + `"}`, 200, `"serial":2`},
		{`{"primary":"` + signed + `","key":"xfr.example","secret":"` + xfrSecret + `","algorithm":"hmac-sha256"}`, 200, `"serial":3`},
		{`{"primary":"` + signed + `"}`, 502, "bad xfr rcode: 5"},
		{`{"primary":"` + signed + `","key":"xfr.example","secret":"d3Jvbmc="}`, 502, "AXFR of example.org."},
		{`{"primary":"` + broken + `"}`, 400, "no NS records"},
		{`{"primary":"` + dead + `"}`, 502, "refused"},
		{`{"primary":""}`, 400, "primary address missing"},
		{`{"primary":"` + open + `","key":"k"}`, 400, "needs both key and secret"},
		{`{"primary":"` + open + `","key":"k","secret":"` + xfrSecret + `","algorithm":"hmac-md4"}`, 400, "unsupported TSIG algorithm"},
		{`{"primary":"` + open + `","bogus":1}`, 400, "unknown field"},
	}
	for i, tc := range tests {
		code, _, raw := call(t, a, "", "POST", "/v1/zones/example.org/axfr", tc.body)
		if code != tc.wantCode || !strings.Contains(raw, tc.wantText) {
			t.Errorf("test %d: expected %d with %q, got %d %s", i, tc.wantCode, tc.wantText, code, raw)
		}
	}
	z := rep.Zone("example.org.")
	if z == nil || z.Records() != 4 || z.SOA().Serial != 3 {
		t.Fatalf("expected the imported zone with serial 3 (each import bumps it), got %v", z)
	}
}

// freeTCP returns a loopback address nobody listens on.
func freeTCP(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestPrimaryAddr(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.1":         "192.0.2.1:53",
		"192.0.2.1:5353":    "192.0.2.1:5353",
		"[2001:db8::1]":     "[2001:db8::1]:53",
		"2001:db8::1":       "[2001:db8::1]:53",
		"ns1.example.net":   "ns1.example.net:53",
		"[2001:db8::1]:530": "[2001:db8::1]:530",
	} {
		if got, err := primaryAddr(in); err != nil || got != want {
			t.Errorf("%s: expected %s, got %s %v", in, want, got, err)
		}
	}
	if _, err := primaryAddr("a b"); err == nil {
		t.Error("expected an error for a bad address")
	}
}

// TestAXFRImportBomb: a primary that sends records without end (no closing
// SOA) is cut off at max_zone_records, counted as the records arrive: the
// import is refused with 413, nothing is written and the member stops
// reading long before the primary stops sending.
func TestAXFRImportBomb(t *testing.T) {
	a, rep := newAPIWith(t, apiConfig{maxZone: 1000})
	const bound = 200000 // the primary gives up here
	soa := dnsdiff.ParseZone(t, "example.org.", apiZone)[0]
	primary, sent := dnsdiff.StartEndlessPrimary(t, soa, bound, func(i int) string { return fmt.Sprintf("h%d.example.org. 300 IN A 192.0.2.1", i) })

	code, _, raw := call(t, a, "", "POST", "/v1/zones/example.org/axfr", `{"primary":"`+primary+`"}`)
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(raw, "max_zone_records") {
		t.Fatalf("expected 413 naming max_zone_records, got %d %s", code, raw)
	}
	if rep.Zone("example.org.") != nil {
		t.Error("a refused import wrote the zone")
	}
	if n := sent.Load(); n >= bound {
		t.Errorf("the member read the whole endless transfer (%d records) instead of stopping at its limit", n)
	}
	t.Logf("the primary had sent %d records when the member hung up (limit 1000)", sent.Load())
}

// TestZoneAdmission: the API creates only zones of the server block and
// at most max_zones of them; replacing a zone it holds is always taken.
func TestZoneAdmission(t *testing.T) {
	a, rep := newAPIWith(t, apiConfig{zones: []string{"example.org.", "example.net."}, maxZones: 1})
	zoneFor := func(origin string) string { return strings.ReplaceAll(apiZone, "example.org.", origin) }
	if code, _, raw := call(t, a, "", "PUT", "/v1/zones/example.com", zoneFor("example.com.")); code != http.StatusForbidden || !strings.Contains(raw, "server block") {
		t.Errorf("a zone outside the block: expected 403, got %d %s", code, raw)
	}
	if code, _, raw := call(t, a, "", "POST", "/v1/zones/example.com/axfr", `{"primary":"127.0.0.1:1"}`); code != http.StatusForbidden {
		t.Errorf("an AXFR import outside the block: expected 403, got %d %s", code, raw)
	}
	if code, _, raw := call(t, a, "", "PUT", "/v1/zones/example.org", zoneFor("example.org.")); code != 200 {
		t.Fatalf("expected 200, got %d %s", code, raw)
	}
	if code, _, raw := call(t, a, "", "PUT", "/v1/zones/example.net", zoneFor("example.net.")); code != http.StatusForbidden || !strings.Contains(raw, "max_zones") {
		t.Errorf("a zone past max_zones: expected 403, got %d %s", code, raw)
	}
	if code, _, raw := call(t, a, "", "PUT", "/v1/zones/example.org", zoneFor("example.org.")); code != 200 {
		t.Errorf("replacing a held zone at max_zones: expected 200, got %d %s", code, raw)
	}
	if zones := rep.Zones(); len(zones) != 1 {
		t.Errorf("expected one zone, got %v", zones)
	}
}
