package craftstore

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/craftdns/craftdns/internal/httpapi/apitest"
	"github.com/craftdns/craftdns/plugin/craftstore/replica"

	"github.com/miekg/dns"
)

const apiZone = `$ORIGIN example.org.
$TTL 300
@ IN SOA ns1 hostmaster 1 7200 3600 1209600 300
@ IN NS ns1
ns1 IN A 192.0.2.53
www IN A 192.0.2.10
`

// newAPI starts a single member with its API on a loopback port.
func newAPI(t *testing.T, token string) (*apiServer, *replica.Replica) {
	t.Helper()
	return newAPIWith(t, apiConfig{token: token})
}

// newAPIWith starts a single member with its API configured by cfg, on a
// loopback port, with a timeout of 2s unless cfg has one.
func newAPIWith(t *testing.T, cfg apiConfig) (*apiServer, *replica.Replica) {
	t.Helper()
	cfg.listen = "127.0.0.1:0"
	if cfg.timeout == 0 {
		cfg.timeout = 2 * time.Second
	}
	rep, err := replica.Open(replica.Config{ID: 1, Dir: t.TempDir(), RaftAddr: "127.0.0.1:0",
		Peers: []replica.Member{{ID: 1, Raft: "127.0.0.1:0"}}, Tick: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	a, err := startAPI(cfg, rep, newLeases(time.Now(), true, testRouterKey))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.close(); rep.Close() })
	for deadline := time.Now().Add(10 * time.Second); !rep.Ready(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("member never became ready")
		}
	}
	return a, rep
}

func call(t *testing.T, a *apiServer, token, method, path, body string) (int, map[string]any, string) {
	t.Helper()
	code, raw := apitest.Call(t, method, "http://"+a.addr()+path, token, body)
	var out map[string]any
	json.Unmarshal(raw, &out)
	return code, out, string(raw)
}

func TestAPIZoneLifecycle(t *testing.T) {
	a, rep := newAPI(t, "")
	code, out, raw := call(t, a, "", "PUT", "/v1/zones/example.org", apiZone)
	if code != 200 || out["records"] != float64(4) || out["serial"] != float64(1) {
		t.Fatalf("expected 200 with 4 records serial 1, got %d %s", code, raw)
	}
	code, out, raw = call(t, a, "", "POST", "/v1/zones/example.org/records",
		`{"add":["new 60 IN A 192.0.2.77","new.example.org. 60 IN AAAA 2001:db8::77"],"delete":["www.example.org. 300 IN A 192.0.2.10"]}`)
	if code != 200 || out["serial"] != float64(2) {
		t.Fatalf("expected 200 serial 2, got %d %s", code, raw)
	}
	code, out, raw = call(t, a, "", "GET", "/v1/zones/example.org/records?name=new&type=AAAA", "")
	if code != 200 || !strings.Contains(raw, "2001:db8::77") || strings.Contains(raw, "192.0.2.77") {
		t.Fatalf("expected the AAAA record only, got %d %s", code, raw)
	}
	code, _, raw = call(t, a, "", "GET", "/v1/zones/example.org", "")
	if code != 200 || !strings.HasPrefix(raw, "example.org.\t300\tIN\tSOA") || strings.Contains(raw, "www.example.org") {
		t.Fatalf("expected the zone text with the SOA first and www gone, got %d:\n%s", code, raw)
	}
	// Delete by name and by type.
	code, _, raw = call(t, a, "", "POST", "/v1/zones/example.org/records", `{"delete":[{"name":"new","type":"AAAA"},{"name":"ns1.example.org."}]}`)
	if code != 200 {
		t.Fatalf("expected 200, got %d %s", code, raw)
	}
	if got := len(rep.Zone("example.org.").RRs("new.example.org.", 0)); got != 1 {
		t.Errorf("expected 1 record left at new, got %d", got)
	}
	code, _, raw = call(t, a, "", "GET", "/v1/zones", "")
	if code != 200 || !strings.Contains(raw, `"zone":"example.org."`) || !strings.Contains(raw, `"serial":3`) {
		t.Errorf("expected the zone listed with serial 3, got %d %s", code, raw)
	}
	code, _, raw = call(t, a, "", "GET", "/v1/cluster", "")
	if code != 200 || !strings.Contains(raw, `"leader":1`) || !strings.Contains(raw, `"members":[{"id":1`) {
		t.Errorf("expected cluster status with leader 1, got %d %s", code, raw)
	}
	// Replacing keeps the serial moving forward even with an older file.
	code, out, raw = call(t, a, "", "PUT", "/v1/zones/example.org", apiZone)
	if code != 200 || out["serial"] != float64(4) {
		t.Errorf("expected a replaced zone at serial 4, got %d %s", code, raw)
	}
	code, _, _ = call(t, a, "", "DELETE", "/v1/zones/example.org", "")
	if code != 200 || rep.Zone("example.org.") != nil {
		t.Errorf("expected the zone deleted, got %d", code)
	}
}

func TestAPIRefusals(t *testing.T) {
	a, rep := newAPI(t, "")
	if code, _, raw := call(t, a, "", "PUT", "/v1/zones/example.org", apiZone); code != 200 {
		t.Fatalf("expected 200, got %d %s", code, raw)
	}
	big := `{"add":["` + strings.Repeat("a", 5<<20) + `"]}`
	tests := []struct {
		method, path, body string
		code               int
		msg                string
	}{
		{"POST", "/v1/zones/example.org/records", `{"add":["www IN A not-an-ip"]}`, 400, "add[0]"},
		{"POST", "/v1/zones/example.org/records", `{"add":["x 60 IN TYPE56 \\# 0"]}`, 400, "cannot be stored"},
		{"POST", "/v1/zones/example.org/records", `{"add":["www.example.net. IN A 192.0.2.1"]}`, 400, "outside zone"},
		{"POST", "/v1/zones/example.org/records", `{"add":["www IN CNAME ns1"]}`, 409, "CNAME and other data"},
		{"POST", "/v1/zones/example.org/records", `{"add":["@ IN CNAME ns1"]}`, 409, "CNAME"},
		{"POST", "/v1/zones/example.org/records", `{"delete":[{"name":"@","type":"SOA"}]}`, 400, "SOA"},
		{"POST", "/v1/zones/example.org/records", `{"delete":[{"name":"@","type":"NS"}]}`, 400, "apex NS"},
		{"POST", "/v1/zones/example.org/records", `{"delete":["example.org. IN NS ns1.example.org."]}`, 409, "NS"},
		{"POST", "/v1/zones/example.org/records", `{"delete":[{"name":"example.org."}]}`, 400, "apex"},
		{"POST", "/v1/zones/example.org/records", `{"delete":[{"name":"x","type":"BOGUS"}]}`, 400, "unknown type"},
		{"POST", "/v1/zones/example.org/records", `{"add":[]}`, 400, "nothing"},
		{"POST", "/v1/zones/example.org/records", `{"ad":[]}`, 400, "unknown field"},
		{"POST", "/v1/zones/example.org/records", `not json`, 400, "body"},
		{"POST", "/v1/zones/example.org/records", big, 413, "over"},
		{"POST", "/v1/zones/nope.example/records", `{"add":["a IN A 192.0.2.1"]}`, 404, "not found"},
		{"GET", "/v1/zones/nope.example", "", 404, "not found"},
		{"PUT", "/v1/zones/example.net", "@ IN NS ns1\n", 400, "no SOA"},
		{"PUT", "/v1/zones/example.net", "@ 300 IN SOA ns1 h 1 2 3 4 5\n", 400, "no NS"},
		{"PUT", "/v1/zones/example.net", "@ 300 IN SOA ns1 h 1 2 3 4 5\n@ IN NS ns1\nx IN A 1.2.3.4\nx IN CNAME y\n", 400, "CNAME and other data"},
		{"PUT", "/v1/zones/example.net", "@ 300 IN SOA ns1 h 1 2 3 4 5\n@ IN NS ns1\nw.example.com. IN A 1.2.3.4\n", 400, "outside zone"},
		{"PUT", "/v1/zones/example.net", "@ 300 IN SOA ns1 h 1 2 3 4 5\n$INCLUDE /etc/passwd\n", 400, ""},
		{"PUT", "/v1/zones/bad..name", "", 400, "domain name"},
		{"DELETE", "/v1/cluster/members/0", "", 400, "positive"},
		{"DELETE", "/v1/cluster/members/9", "", 404, "not found"},
		{"POST", "/v1/cluster/members", `{"id":1,"raft":"127.0.0.1:1"}`, 409, "exists"},
		{"POST", "/v1/cluster/members", `{"id":2,"raft":"nope"}`, 400, "raft address"},
	}
	for i, tc := range tests {
		code, out, raw := call(t, a, "", tc.method, tc.path, tc.body)
		if code != tc.code {
			t.Errorf("test %d (%s %s): expected %d, got %d %s", i, tc.method, tc.path, tc.code, code, raw)
			continue
		}
		msg, _ := out["error"].(string)
		if msg == "" || !strings.Contains(msg, tc.msg) {
			t.Errorf("test %d: expected a JSON error containing %q, got %s", i, tc.msg, raw)
		}
	}
	if soa := rep.Zone("example.org.").SOA(); soa.Serial != 1 {
		t.Errorf("expected nothing written by refused requests (serial 1), got serial %d", soa.Serial)
	}
	if rep.Zone("example.net.") != nil {
		t.Error("expected no zone created by refused imports")
	}
}

// TestAPIContentType: a body says what it is, or it is refused with 415
// and not read; the media type's parameters do not matter.
func TestAPIContentType(t *testing.T) {
	a, rep := newAPI(t, "")
	url := "http://" + a.addr()
	if code, raw := apitest.CallType(t, "PUT", url+"/v1/zones/example.org", "", "text/dns; charset=utf-8", apiZone); code != 200 {
		t.Fatalf("expected 200 for a text/dns zone, got %d %s", code, raw)
	}
	change := `{"add":["new 60 IN A 192.0.2.77"]}`
	tests := []struct{ method, path, ctype, body string }{
		{"PUT", "/v1/zones/example.net", "", apiZone},
		{"PUT", "/v1/zones/example.net", "application/json", apiZone},
		{"PUT", "/v1/zones/example.net", "text/plain", apiZone},
		{"PUT", "/v1/zones/example.net", "application/x-www-form-urlencoded", apiZone},
		{"PUT", "/v1/zones/example.net", "text/dns;;", apiZone},
		{"POST", "/v1/zones/example.org/records", "", change},
		{"POST", "/v1/zones/example.org/records", "text/dns", change},
		{"POST", "/v1/zones/example.org/records", "application/x-www-form-urlencoded", change},
		{"POST", "/v1/zones/example.org/axfr", "text/plain", `{"primary":"127.0.0.1:1"}`},
		{"POST", "/v1/cluster/members", "", `{"id":2,"raft":"127.0.0.1:7"}`},
		{"POST", "/v1/txn/00000000000000000000000000000001/prepare", "text/plain", `{}`},
		{"DELETE", "/v1/zones/example.org/xfr/00000000000000000000000000000001", "text/plain", `{"serial":1}`},
	}
	for _, tc := range tests {
		code, raw := apitest.CallType(t, tc.method, url+tc.path, "", tc.ctype, tc.body)
		var out map[string]string
		json.Unmarshal(raw, &out)
		if code != http.StatusUnsupportedMediaType || !strings.Contains(out["error"], "Content-Type") {
			t.Errorf("%s %s as %q: expected 415 with a JSON error, got %d %s", tc.method, tc.path, tc.ctype, code, raw)
		}
	}
	if soa := rep.Zone("example.org.").SOA(); soa.Serial != 1 || rep.Zone("example.net.") != nil {
		t.Errorf("expected nothing written by refused bodies, got serial %d, example.net %v", soa.Serial, rep.Zone("example.net.") != nil)
	}
	if st, err := rep.Status(); err != nil || len(st.Members) != 1 {
		t.Errorf("expected no member added, got %+v %v", st.Members, err)
	}
	if code, raw := apitest.CallType(t, "POST", url+"/v1/zones/example.org/records", "", "Application/JSON; charset=UTF-8", change); code != 200 {
		t.Errorf("expected 200 for JSON with a charset, got %d %s", code, raw)
	}
}

func TestAPIToken(t *testing.T) {
	a, _ := newAPI(t, "s3cret")
	for _, tok := range []string{"", "wrong"} {
		if code, out, _ := call(t, a, tok, "GET", "/v1/zones", ""); code != 401 || out["error"] == nil {
			t.Errorf("expected 401 with token %q, got %d", tok, code)
		}
	}
	if code, _, raw := call(t, a, "s3cret", "GET", "/v1/zones", ""); code != 200 {
		t.Errorf("expected 200 with the token, got %d %s", code, raw)
	}
}

// TestAPISignedTypes: a record change that adds or deletes DNSSEC records
// is refused (400) and writes nothing, as an RFC 2136 UPDATE of them is
// (NOTIMP); a signed zone is imported whole.
func TestAPISignedTypes(t *testing.T) {
	a, rep := newAPI(t, "")
	signed := apiZone + "www IN RRSIG A 13 3 300 20300101000000 20200101000000 12345 example.org. AAAA\n"
	if code, _, raw := call(t, a, "", "PUT", "/v1/zones/example.org", signed); code != http.StatusOK {
		t.Fatalf("PUT of a signed zone: %d %s", code, raw)
	}
	serial := rep.Zone("example.org.").SOA().Serial
	for _, body := range []string{
		`{"add":["www 300 IN RRSIG A 13 3 300 20300101000000 20200101000000 54321 example.org. BBBB"]}`,
		`{"add":["new 300 IN A 192.0.2.1", "sub 300 IN DS 12345 13 2 49FD46E6C4B45C55D4AC69CBD3CD34AC1AFE51DE0A0CE9D9F2DC4AB5B4C5C4E3"]}`,
		`{"delete":[{"name":"www","type":"RRSIG"}]}`,
	} {
		code, out, raw := call(t, a, "", "POST", "/v1/zones/example.org/records", body)
		if msg, _ := out["error"].(string); code != http.StatusBadRequest || !strings.Contains(msg, "signed zone") {
			t.Errorf("%s: expected 400 saying to import the signed zone, got %d %s", body, code, raw)
		}
	}
	if got := rep.Zone("example.org.").SOA().Serial; got != serial || len(rep.Zone("example.org.").RRs("new.example.org.", dns.TypeA)) != 0 {
		t.Errorf("refused changes wrote something: serial %d (was %d)", got, serial)
	}
}

// TestAPIMaxZoneRecords: an import over max_zone_records ($GENERATE
// expansions counted) is refused with 413 and writes nothing.
func TestAPIMaxZoneRecords(t *testing.T) {
	a, rep := newAPIWith(t, apiConfig{maxZone: 100})
	generated := apiZone + "$GENERATE 1-1000 host-$ 300 IN A 192.0.2.2\n"
	code, out, raw := call(t, a, "", "PUT", "/v1/zones/example.org", generated)
	if msg, _ := out["error"].(string); code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "max_zone_records") {
		t.Errorf("expected 413 naming max_zone_records, got %d %s", code, raw)
	}
	if rep.Zone("example.org.") != nil {
		t.Error("a refused import created the zone")
	}
	if code, _, raw := call(t, a, "", "PUT", "/v1/zones/example.org", apiZone); code != http.StatusOK {
		t.Errorf("a zone under the limit: %d %s", code, raw)
	}
}

// TestAPIMaxChangeRecords: a change over max_change_records, or one whose
// additions take the zone over max_zone_records, is refused with 413 and
// writes nothing; deleting first makes room.
func TestAPIMaxChangeRecords(t *testing.T) {
	a, rep := newAPIWith(t, apiConfig{maxChange: 3, maxZone: 6}) // the zone holds 4 records
	if code, _, raw := call(t, a, "", "PUT", "/v1/zones/example.org", apiZone); code != 200 {
		t.Fatalf("expected 200, got %d %s", code, raw)
	}
	for _, tc := range []struct{ body, knob string }{
		{`{"add":["a 60 IN A 192.0.2.1","b 60 IN A 192.0.2.1"],"delete":[{"name":"x"},{"name":"y"}]}`, "max_change_records"},
		{`{"add":["a 60 IN A 192.0.2.1","b 60 IN A 192.0.2.1","c 60 IN A 192.0.2.1"]}`, "max_zone_records"},
	} {
		code, out, raw := call(t, a, "", "POST", "/v1/zones/example.org/records", tc.body)
		if msg, _ := out["error"].(string); code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, tc.knob) {
			t.Errorf("%s: expected 413 naming %s, got %d %s", tc.body, tc.knob, code, raw)
		}
	}
	if soa := rep.Zone("example.org.").SOA(); soa.Serial != 1 {
		t.Errorf("expected nothing written (serial 1), got %d", soa.Serial)
	}
	if code, _, raw := call(t, a, "", "POST", "/v1/zones/example.org/records", `{"add":["a 60 IN A 192.0.2.1","b 60 IN A 192.0.2.1"]}`); code != 200 {
		t.Errorf("a change up to the limits: %d %s", code, raw)
	}
	if code, _, raw := call(t, a, "", "POST", "/v1/zones/example.org/records", `{"delete":[{"name":"a"}]}`); code != 200 {
		t.Errorf("a deletion at the zone limit: %d %s", code, raw)
	}
	if got := rep.Zone("example.org.").Records(); got != 5 {
		t.Errorf("expected 5 records, got %d", got)
	}
}
