package craftstore

import (
	"context"
	"testing"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/metrics"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"

	"github.com/craftdns/craftdns/plugin/craftstore/zone"

	"github.com/miekg/dns"
)

// chained runs fn with the writer a plugin gets when the server hands w
// to the first plugin and each of wrap wraps it before passing it on, as
// plugin.NextOrFailure does.
func chained(w dns.ResponseWriter, fn func(w dns.ResponseWriter), wrap ...func(dns.ResponseWriter) dns.ResponseWriter) {
	if len(wrap) == 0 {
		fn(w)
		return
	}
	h := plugin.HandlerFunc(func(_ context.Context, w dns.ResponseWriter, _ *dns.Msg) (int, error) {
		chained(w, fn, wrap[1:]...)
		return 0, nil
	})
	plugin.NextOrFailure("test", h, context.Background(), wrap[0](w), new(dns.Msg))
}

func TestRawWriter(t *testing.T) {
	z := zone.New("example.org.")
	z.Set([]zone.NameRecords{
		{Name: "example.org.", RRs: []dns.RR{
			test.SOA("example.org. 300 IN SOA ns.example.org. h.example.org. 1 7200 3600 1209600 300"),
			test.NS("example.org. 300 IN NS ns.example.org."),
		}},
		{Name: "www.example.org.", RRs: []dns.RR{test.A("www.example.org. 300 IN A 192.0.2.1")}},
	})
	same := func(w dns.ResponseWriter) dns.ResponseWriter { return w }
	var prom *metrics.Recorder
	promWrap := func(w dns.ResponseWriter) dns.ResponseWriter { prom = metrics.NewRecorder(w); return prom }
	logWrap := func(w dns.ResponseWriter) dns.ResponseWriter { return dnstest.NewRecorder(w) }

	for _, tc := range []struct {
		name   string
		wrap   []func(dns.ResponseWriter) dns.ResponseWriter
		packed bool
	}{
		{"first plugin", nil, true},
		{"after errors and acl", []func(dns.ResponseWriter) dns.ResponseWriter{same, same}, true},
		{"after prometheus", []func(dns.ResponseWriter) dns.ResponseWriter{promWrap, same}, true},
		{"after log", []func(dns.ResponseWriter) dns.ResponseWriter{same, logWrap}, false},
	} {
		for _, q := range []struct {
			name  string
			rcode int
		}{{"www.example.org.", dns.RcodeSuccess}, {"nx.example.org.", dns.RcodeNameError}} {
			r := new(dns.Msg)
			r.SetQuestion(q.name, dns.TypeA)
			base := &captureWriter{}
			prom = nil
			var packed bool
			chained(request.NewScrubWriter(r, base), func(w dns.ResponseWriter) {
				packed = writePacked(w, r, z, nil, nil)
			}, tc.wrap...)
			if packed != tc.packed {
				t.Errorf("%s, %s: packed %t, expected %t", tc.name, q.name, packed, tc.packed)
				continue
			}
			if !packed {
				continue
			}
			var m dns.Msg
			if err := m.Unpack(base.b); err != nil || m.Rcode != q.rcode || m.Id != r.Id {
				t.Errorf("%s, %s: expected a reply with rcode %d, got %v\n%s", tc.name, q.name, q.rcode, err, &m)
			}
			if prom != nil && (prom.Rcode != q.rcode || prom.Len != len(base.b)) {
				t.Errorf("%s, %s: prometheus recorded rcode %d and %d octets, expected %d and %d", tc.name, q.name, prom.Rcode, prom.Len, q.rcode, len(base.b))
			}
		}
	}
}

// captureWriter keeps what is written with Write.
type captureWriter struct {
	test.ResponseWriter
	b []byte
}

func (w *captureWriter) Write(b []byte) (int, error) {
	w.b = append([]byte(nil), b...)
	return len(b), nil
}
