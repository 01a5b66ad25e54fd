package rawreply

import (
	"context"
	"testing"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/metrics"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/request"

	"github.com/miekg/dns"
)

func TestWriter(t *testing.T) {
	if chainWriterType == nil {
		t.Fatal("the plugin chain's writer type was not learned")
	}
	scrub := request.NewScrubWriter(new(dns.Msg), &dnstest.Recorder{})
	var got dns.ResponseWriter
	h := plugin.HandlerFunc(func(_ context.Context, w dns.ResponseWriter, _ *dns.Msg) (int, error) {
		got = w
		return 0, nil
	})
	rec := metrics.NewRecorder(scrub)
	plugin.NextOrFailure("test", h, context.Background(), rec, new(dns.Msg))
	rs, ok := Writer(got)
	if !ok || rs.n != 1 {
		t.Fatalf("chain wrapper, prometheus, ScrubWriter: Writer = %d recorders, %v; want 1, true", rs.n, ok)
	}
	rs.SetRcode(dns.RcodeNameError)
	if rec.Rcode != dns.RcodeNameError {
		t.Errorf("SetRcode: recorder has %d", rec.Rcode)
	}
	if _, ok := Writer(dnstest.NewRecorder(scrub)); ok {
		t.Error("a writer of another plugin (log's recorder) is passed by")
	}
	if _, ok := Writer(&dnstest.Recorder{}); ok {
		t.Error("a chain without the server's ScrubWriter is taken")
	}
}
