package craftstore

import (
	"sync"

	"github.com/coredns/coredns/request"

	"github.com/craftdns/craftdns/internal/policy"
	"github.com/craftdns/craftdns/internal/rawreply"
	"github.com/craftdns/craftdns/plugin/craftstore/zone"

	"github.com/miekg/dns"
)

// Answers written as bytes: the common answers (zone.AppendReply) are
// packed straight into a pooled buffer and written with
// ResponseWriter.Write when every writer in the chain passes Write on
// (internal/rawreply); any other answer goes through Lookup and WriteMsg.

// replyBufs holds the buffers of packed replies.
var replyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1232); return &b }}

// writePacked answers r from z, for client cl whose query carries ECS
// option ecs (nil: none), with a packed reply when it is one of the common
// cases (a policy's answer among them) and w takes bytes; it reports
// whether it did.
func writePacked(w dns.ResponseWriter, r *dns.Msg, z *zone.Zone, cl *policy.Client, ecs *dns.EDNS0_SUBNET) bool {
	rs, ok := rawreply.Writer(w)
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
		rs.SetRcode(rcode)
		w.Write(out)
	}
	if cap(out) <= 4096 {
		*bp = out[:0]
		replyBufs.Put(bp)
	}
	return ok
}
