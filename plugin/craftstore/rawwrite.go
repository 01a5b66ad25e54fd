package craftstore

import (
	"context"
	"reflect"
	"sync"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/metrics"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/request"

	"github.com/craftdns/craftdns/internal/policy"
	"github.com/craftdns/craftdns/plugin/craftstore/zone"

	"github.com/miekg/dns"
)

// Answers written as bytes.
//
// The common answers (zone.AppendReply) are packed straight into a pooled
// buffer and written with ResponseWriter.Write: no dns.Msg is built, and the
// server's ScrubWriter, whose SizeAndDo, Scrub and Pack the packed form
// already matches, is passed by. That is only right when every writer
// between craftstore and the server handles Write as it would WriteMsg, so
// rawWriter walks the chain of writers first and allows only:
//   - the plugin chain's own wrapper (plugin.NextOrFailure's), which tracks
//     the plugin that wrote and passes both on;
//   - prometheus's recorder, which counts the reply's size on Write but
//     takes its rcode from WriteMsg: craftstore sets the rcode itself;
//   - the server's ScrubWriter, the end of the chain.
//
// Any other writer (log, dnstap, rewrite, minimal, loadbalance, a TSIG
// signer, ...) may need the dns.Msg, so the answer then goes through
// Lookup and WriteMsg as before.

// chainWriterType is the type of the writer plugin.NextOrFailure hands to
// the next plugin: unexported in CoreDNS, so learned by calling it once.
var chainWriterType = func() reflect.Type {
	var typ reflect.Type
	h := plugin.HandlerFunc(func(_ context.Context, w dns.ResponseWriter, _ *dns.Msg) (int, error) {
		typ = reflect.TypeOf(w)
		return 0, nil
	})
	plugin.NextOrFailure("craftstore", h, context.Background(), &dnstest.Recorder{}, new(dns.Msg))
	// It must embed the next writer as its first field.
	if typ == nil || typ.Kind() != reflect.Pointer || typ.Elem().Kind() != reflect.Struct ||
		typ.Elem().NumField() == 0 || typ.Elem().Field(0).Type != reflect.TypeFor[dns.ResponseWriter]() {
		return nil
	}
	return typ
}()

// recorders are the prometheus recorders between craftstore and the
// server.
type recorders struct {
	n    int
	recs [4]*dnstest.Recorder
}

// rawWriter reports whether w takes a reply written with Write, and returns
// the recorders whose rcode craftstore then sets.
func rawWriter(w dns.ResponseWriter) (recorders, bool) {
	var rs recorders
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

// replyBufs holds the buffers of packed replies.
var replyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1232); return &b }}

// writePacked answers r from z, for client cl whose query carries ECS
// option ecs (nil: none), with a packed reply when it is one of the common
// cases (a policy's answer among them) and w takes bytes; it reports
// whether it did.
func writePacked(w dns.ResponseWriter, r *dns.Msg, z *zone.Zone, cl *policy.Client, ecs *dns.EDNS0_SUBNET) bool {
	rs, ok := rawWriter(w)
	if !ok {
		return false
	}
	state := request.Request{Req: r, W: w}
	size := state.Size()
	if state.Proto() == "udp" {
		// Larger UDP replies are compressed by the server's Scrub.
		size = min(size, 1220)
	}
	bp := replyBufs.Get().(*[]byte)
	out, rcode, ok := z.AppendReplyFor((*bp)[:0], r, size, cl, ecs)
	if ok {
		for _, rec := range rs.recs[:rs.n] {
			rec.Rcode = rcode
		}
		w.Write(out)
	}
	if cap(out) <= 4096 {
		*bp = out[:0]
		replyBufs.Put(bp)
	}
	return ok
}
