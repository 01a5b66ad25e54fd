package craftstore

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/craftdns/craftdns/internal/txn"
	"github.com/craftdns/craftdns/internal/xfrstream"
	"github.com/craftdns/craftdns/plugin/craftstore/replica"

	"github.com/miekg/dns"
)

// readXfr requests a transfer stream and reads it whole.
func readXfr(t *testing.T, a *apiServer, token, method, path string) (int, http.Header, []dns.RR, error) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+a.addr()+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, resp.Header, nil, nil
	}
	var rrs []dns.RR
	rd := xfrstream.NewReader(resp.Body)
	for {
		batch, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return resp.StatusCode, resp.Header, rrs, nil
		}
		if err != nil {
			return resp.StatusCode, resp.Header, rrs, err
		}
		rrs = append(rrs, batch...)
	}
}

// TestXfrAPI: the transfer stream a router reads (full, incremental, up to
// date), and fences: a fence waits for a prepared part and then holds off
// new prepares until it is removed or runs out.
func TestXfrAPI(t *testing.T) {
	const token = "s3cret"
	a, rep := newAPI(t, token)
	if code, _, raw := call(t, a, token, "PUT", "/v1/zones/example.org", apiZone); code != http.StatusOK {
		t.Fatalf("PUT: %d %s", code, raw)
	}
	if code, _, raw := call(t, a, token, "POST", "/v1/zones/example.org/records", `{"add":["new 60 IN A 192.0.2.7"]}`); code != http.StatusOK {
		t.Fatalf("change: %d %s", code, raw)
	}
	path := xfrstream.Path("example.org.")

	code, h, rrs, err := readXfr(t, a, token, "GET", path)
	if code != http.StatusOK || err != nil {
		t.Fatalf("GET xfr: %d %v", code, err)
	}
	if h.Get(xfrstream.HeaderSerial) != "2" || h.Get(xfrstream.HeaderBase) != "1" {
		t.Errorf("expected serial 2 base 1, got %q %q", h.Get(xfrstream.HeaderSerial), h.Get(xfrstream.HeaderBase))
	}
	if len(rrs) != 6 || rrs[0].Header().Rrtype != dns.TypeSOA || rrs[5].Header().Rrtype != dns.TypeSOA {
		t.Errorf("full transfer: expected SOA, 4 records, SOA, got %v", rrs)
	}
	if _, _, rrs, _ := readXfr(t, a, token, "GET", path+"?serial=1"); len(rrs) != 5 || rrs[2].Header().Rrtype != dns.TypeSOA {
		t.Errorf("incremental from 1: expected SOA, old SOA, new SOA, the record, SOA, got %v", rrs)
	}
	if _, _, rrs, _ := readXfr(t, a, token, "GET", path+"?serial=2"); len(rrs) != 1 {
		t.Errorf("up to date: expected the SOA alone, got %v", rrs)
	}
	if code, _, _, _ := readXfr(t, a, token, "GET", path+"?serial=x"); code != http.StatusBadRequest {
		t.Errorf("a bad serial: expected 400, got %d", code)
	}
	if code, _, _, _ := readXfr(t, a, token, "GET", xfrstream.Path("nowhere.test.")); code != http.StatusNotFound {
		t.Errorf("an unknown zone: expected 404, got %d", code)
	}
	if code, _, _, _ := readXfr(t, a, "", "GET", path); code != http.StatusUnauthorized {
		t.Errorf("without the token: expected 401, got %d", code)
	}
	if code, _, _, _ := readXfr(t, a, token, "POST", path+"?fence=nope"); code != http.StatusBadRequest {
		t.Errorf("a bad fence id: expected 400, got %d", code)
	}

	prepare := func(id txn.ID, name string) txn.Vote {
		t.Helper()
		return preparePart(t, a, token, id, name)
	}

	// A fence waits for the prepared part to finish, and its snapshot
	// holds the part's change.
	id := txn.NewID()
	if v := prepare(id, "held.example.org."); !v.Yes {
		t.Fatalf("prepare: %+v", v)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		call(t, a, token, "POST", txn.FinishPath(id, txn.Commit), "")
	}()
	fence := txn.NewID()
	code, h, rrs, err = readXfr(t, a, token, "POST", path+"?fence="+fence.String())
	if code != http.StatusOK || err != nil || h.Get(xfrstream.HeaderSerial) != "3" {
		t.Fatalf("fenced transfer: %d %v serial %q", code, err, h.Get(xfrstream.HeaderSerial))
	}
	held := false
	for _, rr := range rrs {
		held = held || strings.EqualFold(rr.Header().Name, "held.example.org.")
	}
	if !held || len(rrs) != 7 {
		t.Errorf("fenced transfer: expected 7 records with held.example.org, got %v", rrs)
	}
	// While the fence holds, a prepare is busy; single-shard writes go on.
	if v := prepare(txn.NewID(), "other.example.org."); !v.Busy {
		t.Errorf("a prepare under a fence: expected busy, got %+v", v)
	}
	if code, _, raw := call(t, a, token, "POST", "/v1/zones/example.org/records", `{"add":["plain 60 IN A 192.0.2.8"]}`); code != http.StatusOK {
		t.Errorf("a change under a fence: %d %s", code, raw)
	}
	// One transfer's fence at a time.
	if code, _, _, _ := readXfr(t, a, token, "POST", path+"?fence="+txn.NewID().String()); code != http.StatusServiceUnavailable {
		t.Errorf("a second fence while one holds: expected 503, got %d", code)
	}
	// Removing the fence records the router's cut.
	cut := `{"serial":77,"shards":{"a":{"serial":3,"base":1},"b":{"serial":9,"base":4}}}`
	if code, out, raw := call(t, a, token, "DELETE", path+"/"+fence.String(), cut); code != http.StatusOK || out["held"] != true {
		t.Fatalf("unfence: expected 200 with the fence held, got %d %s", code, raw)
	}
	if code, out, raw := call(t, a, token, "GET", xfrstream.CutPath("example.org.", 77), ""); code != http.StatusOK || out["serial"] != float64(77) || !strings.Contains(raw, `"b":{"serial":9,"base":4}`) {
		t.Errorf("the cut of serial 77: %d %s", code, raw)
	}
	if code, _, _ := call(t, a, token, "GET", xfrstream.CutPath("example.org.", 78), ""); code != http.StatusNotFound {
		t.Errorf("an unknown cut: expected 404, got %d", code)
	}
	if code, out, raw := call(t, a, token, "DELETE", path+"/"+fence.String(), ""); code != http.StatusOK || out["held"] != false {
		t.Errorf("unfence again: expected 200, not held, got %d %s", code, raw)
	}
	id2 := txn.NewID()
	if v := prepare(id2, "other.example.org."); !v.Yes {
		t.Errorf("a prepare after the fence went: %+v", v)
	}
	call(t, a, token, "POST", txn.FinishPath(id2, txn.Abort), "")
	if rep.TxHeld() {
		t.Fatal("a part is still held after its abort")
	}

	// A difference: the journal's changes from serial 1 folded into one
	// (other.example.org. came and went), sections in canonical order.
	if _, _, rrs, err := readXfr(t, a, token, "GET", path+"?serial=1&net=1"); err != nil || len(rrs) != 7 {
		t.Errorf("one difference from serial 1: expected SOA, old SOA, SOA, 3 records added, SOA, got %v %v", rrs, err)
	} else {
		var got []string
		for _, rr := range rrs {
			got = append(got, strings.ToLower(rr.Header().Name)+dns.TypeToString[rr.Header().Rrtype])
		}
		want := "example.org.SOA example.org.SOA example.org.SOA held.example.org.A new.example.org.A plain.example.org.A example.org.SOA"
		if strings.Join(got, " ") != want || rrs[1].(*dns.SOA).Serial != 1 {
			t.Errorf("one difference from serial 1: expected %s, got %s (%v)", want, strings.Join(got, " "), rrs[1])
		}
	}

	// A serial the journal does not reach: the whole zone.
	if _, _, rrs, err := readXfr(t, a, token, "GET", path+"?serial=4294967000&net=1"); err != nil || len(rrs) < 7 || rrs[1].Header().Rrtype == dns.TypeSOA {
		t.Errorf("from a serial the journal does not reach: expected the whole zone, got %v %v", rrs, err)
	}

	// A fence nobody removes runs out; a prepare that then gets in removes
	// it, and its removal says it no longer held.
	late := txn.NewID()
	if code, _, _, err := readXfr(t, a, token, "POST", path+"?fence="+late.String()); code != http.StatusOK || err != nil {
		t.Fatalf("second fence: %d %v", code, err)
	}
	if v := prepare(txn.NewID(), "late.example.org."); !v.Busy {
		t.Errorf("under the second fence: expected busy, got %+v", v)
	}
	time.Sleep(replica.FenceTTL + 100*time.Millisecond)
	if v := prepare(txn.NewID(), "late.example.org."); !v.Yes {
		t.Errorf("after the fence ran out: expected yes, got %+v", v)
	}
	if code, out, raw := call(t, a, token, "DELETE", path+"/"+late.String(), ""); code != http.StatusOK || out["held"] != false {
		t.Errorf("removing a fence that ran out: expected held false, got %d %s", code, raw)
	}
}
