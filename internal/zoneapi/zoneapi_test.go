package zoneapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

func TestAbsName(t *testing.T) {
	for in, want := range map[string]string{"www": "www.example.org.", "www.example.org": "www.example.org.",
		"WWW.example.org.": "www.example.org.", "@": "example.org.", "example.org": "example.org."} {
		got, err := AbsName("example.org.", in)
		if err != nil || got != want {
			t.Errorf("AbsName(%q): expected %q, got %q %v", in, want, got, err)
		}
	}
	for _, bad := range []string{"www.example.net.", "a..b"} {
		if _, err := AbsName("example.org.", bad); err == nil {
			t.Errorf("AbsName(%q): expected an error", bad)
		} else if st, _, ok := Status(err); !ok || st != http.StatusBadRequest {
			t.Errorf("AbsName(%q): expected a 400, got %v", bad, err)
		}
	}
}

func TestParseZoneErrors(t *testing.T) {
	const head = "@ 300 IN SOA ns1 h 1 2 3 4 5\n@ 300 IN NS ns1\n"
	for _, tc := range []struct{ text, want string }{
		{"@ 300 IN NS ns1\n", "no SOA"},
		{"@ 300 IN SOA ns1 h 1 2 3 4 5\n", "no NS"},
		{head + "@ 300 IN SOA ns2 h 1 2 3 4 5\n", "2 SOA records"},
		{head + "www.example.net. 300 IN A 192.0.2.1\n", "outside zone"},
		{head + "www 300 CH A 192.0.2.1\n", "class must be IN"},
		{head + "www 300 IN SOA ns1 h 1 2 3 4 5\n", "not at the zone apex"},
		{head + "www 300 IN A 192.0.2\n", "A"},
		{head + "www 300 IN CNAME x\nwww 300 IN TXT t\n", "CNAME and other data"},
		{head + "www 300 IN CNAME x\nWWW 300 IN CNAME y\n", "two CNAME records"},
		{head + "www 300 IN TYPE56 \\# 0\n", "cannot be stored"},
		{head + "@ 300 IN CNAME x\n", "CNAME"},
		{head + "$INCLUDE /etc/passwd\n", "include"},
	} {
		_, err := ParseZone("example.org.", tc.text)
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(tc.want)) {
			t.Errorf("%q: expected an error with %q, got %v", tc.text, tc.want, err)
		}
	}
	rrs, err := ParseZone("example.org.", head+"www A 192.0.2.1\n")
	if err != nil || len(rrs) != 3 || rrs[2].Header().Ttl != 300 || rrs[2].Header().Name != "www.example.org." {
		t.Errorf("expected three records, www with the TTL before it (RFC 1035 section 5.1), got %v %v", rrs, err)
	}
}

func TestParseRecord(t *testing.T) {
	rr, err := ParseRecord("example.org.", "www A 192.0.2.1")
	if err != nil || rr.Header().Name != "www.example.org." || rr.Header().Ttl != DefaultTTL {
		t.Fatalf("expected www.example.org. with TTL %d, got %v %v", DefaultTTL, rr, err)
	}
	for _, bad := range []string{"", "www A 192.0.2.1\nftp A 192.0.2.2", "www.example.net. A 192.0.2.1", "www ANY", "www CH A 192.0.2.1", `www TYPE56 \# 0`} {
		if _, err := ParseRecord("example.org.", bad); err == nil {
			t.Errorf("ParseRecord(%q): expected an error", bad)
		}
	}
}

func TestReadChangeAndDeletions(t *testing.T) {
	c, err := ReadChange(strings.NewReader(`{"add":["www A 192.0.2.1"],"delete":["ftp A 192.0.2.2",{"name":"mail","type":"mx"},{"name":"@"}]}`))
	if err != nil || len(c.Add) != 1 || len(c.Delete) != 3 {
		t.Fatalf("expected one addition and three deletions, got %+v %v", c, err)
	}
	want := []Deletion{{Name: ""}, {Name: "mail.example.org.", Type: dns.TypeMX}, {Name: "example.org."}}
	for i, raw := range c.Delete {
		d, err := ParseDeletion("example.org.", raw)
		if err != nil {
			t.Fatalf("delete[%d]: %v", i, err)
		}
		if i == 0 {
			if d.RR == nil || d.RR.Header().Name != "ftp.example.org." {
				t.Errorf("delete[0]: expected the ftp A record, got %+v", d)
			}
			continue
		}
		if d != want[i] {
			t.Errorf("delete[%d]: expected %+v, got %+v", i, want[i], d)
		}
	}
	for _, body := range []string{`{}`, `{"add":[]}`, `{"add":["x"],"extra":1}`, `not json`} {
		_, err := ReadChange(strings.NewReader(body))
		if st, _, ok := Status(err); !ok || st != http.StatusBadRequest {
			t.Errorf("ReadChange(%s): expected a 400, got %v", body, err)
		}
	}
	for _, raw := range []string{`{"name":""}`, `{"name":"x","type":"NOPE"}`, `{"name":"x.example.net."}`, `7`} {
		if _, err := ParseDeletion("example.org.", json.RawMessage(raw)); err == nil {
			t.Errorf("ParseDeletion(%s): expected an error", raw)
		}
	}
}

func TestStatusAndLimits(t *testing.T) {
	// A body over its limit is a 413 with the limit in the message.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/v1/zones/example.org./records", strings.NewReader(`{"add":["`+strings.Repeat("x", 100)+`"]}`))
	_, err := ReadChange(http.MaxBytesReader(rec, req.Body, 10))
	if st, msg, ok := Status(err); !ok || st != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "10 bytes") {
		t.Errorf("expected a 413 naming the limit, got %d %q %v", st, msg, err)
	}
	if _, _, ok := Status(fmt.Errorf("other")); ok {
		t.Error("expected another error to be left to the plugin")
	}
	if st, _, ok := Status(fmt.Errorf("wrapped: %w", Errorf(http.StatusConflict, "x"))); !ok || st != http.StatusConflict {
		t.Errorf("expected a wrapped Error's status, got %d", st)
	}
}

func TestZoneParam(t *testing.T) {
	mux := http.NewServeMux()
	var got string
	var gotErr error
	mux.HandleFunc("GET /v1/zones/{zone}", func(w http.ResponseWriter, r *http.Request) { got, gotErr = ZoneParam(r) })
	mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/zones/Example.ORG", nil))
	if got != "example.org." || gotErr != nil {
		t.Errorf("expected example.org., got %q %v", got, gotErr)
	}
	mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/zones/a..b", nil))
	if gotErr == nil {
		t.Errorf("expected an error for a..b, got %q", got)
	}
}

func TestRecordsQuery(t *testing.T) {
	for target, want := range map[string]string{
		"/r?name=www&type=mx":    "www.example.org. MX",
		"/r?name=@":              "example.org. 0",
		"/r":                     "error",
		"/r?name=www&type=XX":    "error",
		"/r?name=a.example.net.": "error",
	} {
		name, qtype, err := RecordsQuery(httptest.NewRequest("GET", target, nil), "example.org.")
		got := "error"
		if err == nil {
			got = name + " " + dns.TypeToString[qtype]
			if qtype == 0 {
				got = name + " 0"
			}
		}
		if got != want {
			t.Errorf("%s: expected %q, got %q (%v)", target, want, got, err)
		}
	}
}

// TestSignedTypes: a record change may not touch DNSSEC records, as an
// UPDATE may not; a zone import holds them.
func TestSignedTypes(t *testing.T) {
	for _, text := range []string{
		"www 300 IN RRSIG A 13 3 300 20300101000000 20200101000000 12345 example.org. AAAA",
		"sub 300 IN DS 12345 13 2 49FD46E6C4B45C55D4AC69CBD3CD34AC1AFE51DE0A0CE9D9F2DC4AB5B4C5C4E3",
		"@ 300 IN DNSKEY 257 3 13 AAAA",
		"www 300 IN NSEC zzz.example.org. A RRSIG NSEC",
	} {
		if _, err := ParseRecord("example.org.", text); err == nil || !strings.Contains(err.Error(), "signed zone") {
			t.Errorf("%s: expected a refusal that says to import the signed zone, got %v", text, err)
		}
	}
	if _, err := ParseDeletion("example.org.", json.RawMessage(`{"name":"www","type":"rrsig"}`)); err == nil {
		t.Error("deleting a name's RRSIGs: expected a refusal")
	}
	if _, err := ParseDeletion("example.org.", json.RawMessage(`{"name":"www","type":"A"}`)); err != nil {
		t.Errorf("deleting a name's A records: %v", err)
	}
	signed := "$ORIGIN example.org.\n@ 300 IN SOA ns1 h 1 7200 3600 1209600 300\n@ 300 IN NS ns1\nns1 300 IN A 192.0.2.1\n" +
		"ns1 300 IN RRSIG A 13 3 300 20300101000000 20200101000000 12345 example.org. AAAA\n"
	if _, err := ParseZone("example.org.", signed); err != nil {
		t.Errorf("a signed zone's import: %v", err)
	}
}

// TestParseZoneMax: the limit counts $GENERATE expansions: a few bytes of
// $GENERATE lines are refused (413) once they make more records than it.
func TestParseZoneMax(t *testing.T) {
	text := "$ORIGIN example.org.\n@ 300 IN SOA ns1 h 1 7200 3600 1209600 300\n@ 300 IN NS ns1\nns1 300 IN A 192.0.2.1\n" +
		"$GENERATE 1-5000 host-$ 300 IN A 192.0.2.2\n"
	if _, err := ParseZoneMax("example.org.", text, 1000); err == nil {
		t.Fatal("expected 5,003 records over a limit of 1,000 refused")
	} else if status, _, ok := Status(err); !ok || status != http.StatusRequestEntityTooLarge || !strings.Contains(err.Error(), "$GENERATE") {
		t.Errorf("expected 413 naming $GENERATE, got %v", err)
	}
	if rrs, err := ParseZoneMax("example.org.", text, 5003); err != nil || len(rrs) != 5003 {
		t.Errorf("at the limit: expected 5,003 records, got %d %v", len(rrs), err)
	}
	if rrs, err := ParseZone("example.org.", text); err != nil || len(rrs) != 5003 {
		t.Errorf("without a limit: expected 5,003 records, got %d %v", len(rrs), err)
	}
}

// TestGenerated: $GENERATE lines are counted without being expanded, so
// that a bomb of them is refused before a record is made.
func TestGenerated(t *testing.T) {
	for text, want := range map[string]int{
		"$GENERATE 1-100 h$ A 192.0.2.1\n":                                    100,
		"$generate 0-99/10 h$ A 192.0.2.1\n$GENERATE 5-5 x$ A 192.0.2.1":      11,
		"www A 192.0.2.1\n; $GENERATE 1-9 h$ A 192.0.2.1\n":                   0,
		"$GENERATE 9-1 h$ A 192.0.2.1\n$GENERATE x-y h$ A 192.0.2.1\n":        0,
		"$GENERATE 1-100/0 h$ A 192.0.2.1\n":                                  0,
		strings.Repeat("$GENERATE 0-9223372036854775806 h$ A 192.0.2.1\n", 3): 1 << 40,
	} {
		if got := generated(text); got != want {
			t.Errorf("%q: expected %d, got %d", text, want, got)
		}
	}
	// 150 lines of 65,536 each: refused at once, nothing made.
	bomb := "$ORIGIN example.org.\n@ 300 IN SOA ns1 h 1 7200 3600 1209600 300\n@ 300 IN NS ns1\n" +
		strings.Repeat("$GENERATE 0-65535 h$ 300 IN A 192.0.2.2\n", 150)
	allocs := testing.AllocsPerRun(1, func() {
		if _, err := ParseZoneMax("example.org.", bomb, DefaultMaxZoneRecords); err == nil {
			t.Fatal("expected the bomb refused")
		}
	})
	if allocs > 1000 {
		t.Errorf("the refused bomb made %v allocations: it was expanded", allocs)
	}
}
