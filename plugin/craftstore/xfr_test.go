package craftstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/plugin/transfer"

	"github.com/craftdns/craftdns/internal/xfrnotify"
	"github.com/craftdns/craftdns/internal/zoneapi"
	"github.com/craftdns/craftdns/plugin/craftstore/replica"

	"github.com/miekg/dns"
)

// newTransferer serves example.org (from apiZone) from a single member.
func newTransferer(t *testing.T) (*Craftstore, *replica.Replica) {
	t.Helper()
	_, rep := newAPI(t, "")
	rrs, err := zoneapi.ParseZone("example.org.", apiZone)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rep.PutZone(context.Background(), "example.org.", rrs, false); err != nil {
		t.Fatal(err)
	}
	cs := &Craftstore{Zones: []string{"org."}}
	cs.rep.Store(rep)
	return cs, rep
}

// drain reads a transfer channel to its end.
func drain(ch <-chan []dns.RR) []dns.RR {
	var out []dns.RR
	for rrs := range ch {
		out = append(out, rrs...)
	}
	return out
}

func TestTransferer(t *testing.T) {
	cs, rep := newTransferer(t)
	for _, name := range []string{"example.com.", "other.org.", "www.example.org."} {
		if _, err := cs.Transfer(name, 0); err != transfer.ErrNotAuthoritative {
			t.Errorf("%s: expected ErrNotAuthoritative, got %v", name, err)
		}
	}
	ch, err := cs.Transfer("Example.ORG.", 0)
	if err != nil {
		t.Fatal(err)
	}
	axfr := drain(ch)
	if len(axfr) != 5 || axfr[0].Header().Rrtype != dns.TypeSOA || axfr[4].Header().Rrtype != dns.TypeSOA {
		t.Fatalf("expected SOA, 3 records, SOA; got %v", axfr)
	}
	if _, err := rep.Change(context.Background(), "example.org.", []dns.RR{test.A("new.example.org. 60 IN A 192.0.2.1")}, nil); err != nil {
		t.Fatal(err)
	}
	ch, _ = cs.Transfer("example.org.", 1)
	ixfr := drain(ch)
	want := []string{"SOA 2", "SOA 1", "SOA 2", "A new.example.org.", "SOA 2"}
	if got := shortRRs(ixfr); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("expected IXFR %v, got %v", want, got)
	}
}

func shortRRs(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		switch rr := rr.(type) {
		case *dns.SOA:
			out = append(out, fmt.Sprintf("SOA %d", rr.Serial))
		default:
			out = append(out, dns.TypeToString[rr.Header().Rrtype]+" "+rr.Header().Name)
		}
	}
	return out
}

// xfrWriter collects what the transfer plugin writes over "TCP".
type xfrWriter struct {
	test.ResponseWriter
	msgs []*dns.Msg
}

func (w *xfrWriter) WriteMsg(m *dns.Msg) error {
	w.msgs = append(w.msgs, m)
	return nil
}

// TestTransferPlugin runs transfers through the stock transfer plugin as
// the server does: it discovers Transferers among the block's handlers.
func TestTransferPlugin(t *testing.T) {
	cs, rep := newTransferer(t)
	setup, err := caddy.DirectiveAction("dns", "transfer")
	if err != nil {
		t.Fatal(err)
	}
	c := caddy.NewTestController("dns", "transfer {\n to *\n}")
	c.ServerBlockKeys = []string{"example.org."}
	if err := setup(c); err != nil {
		t.Fatal(err)
	}
	cfg := dnsserver.GetConfig(c)
	xfr := cfg.Plugin[0](nil).(*transfer.Transfer)
	xfr.Transferers = []transfer.Transferer{cs}

	if _, err := rep.Change(context.Background(), "example.org.", []dns.RR{test.A("new.example.org. 60 IN A 192.0.2.1")}, nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		qtype  uint16
		serial uint32
		want   string
	}{
		{dns.TypeAXFR, 0, "SOA 2,NS example.org.,A new.example.org.,A ns1.example.org.,A www.example.org.,SOA 2"},
		{dns.TypeIXFR, 1, "SOA 2,SOA 1,SOA 2,A new.example.org.,SOA 2"},
		{dns.TypeIXFR, 2, "SOA 2"},
	} {
		m := new(dns.Msg)
		m.SetQuestion("example.org.", tc.qtype)
		if tc.qtype == dns.TypeIXFR {
			m.Ns = []dns.RR{&dns.SOA{Hdr: dns.RR_Header{Name: "example.org.", Rrtype: dns.TypeSOA, Class: dns.ClassINET}, Serial: tc.serial}}
		}
		w := &xfrWriter{ResponseWriter: test.ResponseWriter{TCP: true}}
		if _, err := xfr.ServeDNS(context.Background(), w, m); err != nil {
			t.Fatal(err)
		}
		var got []dns.RR
		for _, r := range w.msgs {
			if r.Rcode != dns.RcodeSuccess {
				t.Errorf("expected NOERROR, got %s", dns.RcodeToString[r.Rcode])
			}
			got = append(got, r.Answer...)
		}
		if s := strings.Join(shortRRs(got), ","); s != tc.want {
			t.Errorf("%s %d: expected %s, got %s", dns.TypeToString[tc.qtype], tc.serial, tc.want, s)
		}
	}
}

// TestNotifyHub: a member's changes reach the notifiers of its server
// blocks until they are removed.
func TestNotifyHub(t *testing.T) {
	hub := &notifyHub{}
	var mu sync.Mutex
	sent := map[string]int{}
	n := xfrnotify.New([]string{"org."}, func(zone string) error {
		mu.Lock()
		sent[zone]++
		mu.Unlock()
		return nil
	}, log)
	n.Settle = time.Millisecond
	hub.add(n)
	hub.changed("example.org.")
	for deadline := time.Now().Add(5 * time.Second); !n.Idle(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the NOTIFYs never finished")
		}
	}
	hub.remove(n)
	hub.changed("example.org.")
	time.Sleep(20 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if sent["example.org."] != 2 || len(hub.subs) != 0 {
		t.Errorf("expected the NOTIFY and its trailing one, then none, got %v (%d subscribed)", sent, len(hub.subs))
	}
}

func TestParseTransferProperties(t *testing.T) {
	tests := []struct {
		input   string
		wantErr string
		journal int
		seed    seedSource
	}{
		{input: "craftstore example.org {\n data /tmp/x\n}", journal: 0},
		{input: "craftstore example.org {\n data /tmp/x\n journal 50\n}", journal: 50},
		{input: "craftstore example.org {\n data /tmp/x\n journal 0\n}", journal: -1},
		{input: "craftstore example.org {\n data /tmp/x\n journal -1\n}", wantErr: "invalid syntax"},
		{input: "craftstore example.org {\n data /tmp/x\n seed example.org axfr 192.0.2.1\n}", seed: seedSource{primary: "192.0.2.1:53"}},
		{input: "craftstore example.org {\n data /tmp/x\n seed example.org axfr ns.example.net:5353\n}", seed: seedSource{primary: "ns.example.net:5353"}},
		{input: "craftstore example.org {\n data /tmp/x\n seed example.org axfr\n}", wantErr: "no such file"},
		{input: "craftstore example.org {\n data /tmp/x\n seed example.org xfr 192.0.2.1\n}", wantErr: "Wrong argument count"},
	}
	for i, tc := range tests {
		cs, err := parse(caddy.NewTestController("dns", tc.input))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("test %d: expected error with %q, got %v", i, tc.wantErr, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("test %d: expected no error, got %v", i, err)
			continue
		}
		if cs.cfg.journal != tc.journal {
			t.Errorf("test %d: expected journal %d, got %d", i, tc.journal, cs.cfg.journal)
		}
		if tc.seed != (seedSource{}) && cs.cfg.seeds["example.org."] != tc.seed {
			t.Errorf("test %d: expected seed %+v, got %+v", i, tc.seed, cs.cfg.seeds)
		}
	}
}
