// Package rawreply tells whether a reply may be written as bytes.
//
// craftstore packs its common answers straight into a buffer and craftroute
// relays its members' answers as they came (no dns.Msg either way), both
// with ResponseWriter.Write, passing by the server's ScrubWriter, whose
// SizeAndDo, Scrub and Pack the bytes already match. That is only right when
// every writer between the plugin and the server handles Write as it would
// WriteMsg, so Writer walks the chain of writers first and allows only:
//   - the plugin chain's own wrapper (plugin.NextOrFailure's), which tracks
//     the plugin that wrote and passes both on;
//   - prometheus's recorder, which counts the reply's size on Write but
//     takes its rcode from WriteMsg: the plugin sets the rcode itself
//     (Recorders.SetRcode);
//   - the server's ScrubWriter, the end of the chain.
//
// Any other writer (log, dnstap, rewrite, minimal, loadbalance, a TSIG
// signer, ...) may need the dns.Msg, so the answer then goes through
// WriteMsg.
package rawreply

import (
	"context"
	"reflect"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/metrics"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/request"

	"github.com/miekg/dns"
)

// chainWriterType is the type of the writer plugin.NextOrFailure hands to
// the next plugin: unexported in CoreDNS, so learned by calling it once.
var chainWriterType = func() reflect.Type {
	var typ reflect.Type
	h := plugin.HandlerFunc(func(_ context.Context, w dns.ResponseWriter, _ *dns.Msg) (int, error) {
		typ = reflect.TypeOf(w)
		return 0, nil
	})
	plugin.NextOrFailure("rawreply", h, context.Background(), &dnstest.Recorder{}, new(dns.Msg))
	// It must embed the next writer as its first field.
	if typ == nil || typ.Kind() != reflect.Pointer || typ.Elem().Kind() != reflect.Struct ||
		typ.Elem().NumField() == 0 || typ.Elem().Field(0).Type != reflect.TypeFor[dns.ResponseWriter]() {
		return nil
	}
	return typ
}()

// Recorders are the prometheus recorders between a plugin and the server.
type Recorders struct {
	n    int
	recs [4]*dnstest.Recorder
}

// SetRcode sets the rcode the recorders count for a reply written with
// Write.
func (rs *Recorders) SetRcode(rcode int) {
	for _, rec := range rs.recs[:rs.n] {
		rec.Rcode = rcode
	}
}

// Writer reports whether w takes a reply written with Write, and returns
// the recorders whose rcode the plugin then sets.
func Writer(w dns.ResponseWriter) (Recorders, bool) {
	var rs Recorders
	for range 32 {
		switch x := w.(type) {
		case *request.ScrubWriter:
			return rs, true
		case *metrics.Recorder:
			if rs.n == len(rs.recs) {
				return rs, false
			}
			rs.recs[rs.n] = x.Recorder
			rs.n++
			w = x.Recorder.ResponseWriter
		default:
			if chainWriterType == nil || reflect.TypeOf(w) != chainWriterType {
				return rs, false
			}
			inner, ok := reflect.ValueOf(w).Elem().Field(0).Interface().(dns.ResponseWriter)
			if !ok {
				return rs, false
			}
			w = inner
		}
	}
	return rs, false
}
