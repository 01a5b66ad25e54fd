package craftroute

import (
	"context"
	"testing"

	"github.com/craftdns/craftdns/internal/dnsdiff"

	"github.com/miekg/dns"
)

// TestSerialPresented: shards of a key-mode-name zone keep their own
// serials; the router answers with the highest it has seen, whichever shard
// answered.
func TestSerialPresented(t *testing.T) {
	c, _ := testRouter(t, "example.org.", serveZone, 2)
	ms := c.ex.(memShards)
	// Shard s1 took a change: its serial is ahead.
	rrs := []dns.RR{}
	for _, rr := range dnsdiff.ParseZone(t, "example.org.", serveZone) {
		if soa, ok := rr.(*dns.SOA); ok {
			soa.Serial = 5
		}
		rrs = append(rrs, rr)
	}
	ms["s1"].Load(layout(t, c, "example.org.", rrs)["s1"])

	var got []uint32
	for _, name := range []string{"example.org.", "nx1.example.org.", "nx2.example.org.", "nx3.example.org."} {
		for _, s := range []string{"s0", "s1"} {
			r := new(dns.Msg)
			r.SetQuestion(name, dns.TypeSOA)
			resp, err := c.exchange(context.Background(), c.shard(s), query(r, name, dns.TypeSOA))
			if err != nil {
				t.Fatal(err)
			}
			c.soa.present(resp)
			for _, rr := range append(resp.Answer, resp.Ns...) {
				if soa, ok := rr.(*dns.SOA); ok {
					got = append(got, soa.Serial)
				}
			}
		}
	}
	// Once serial 5 was seen, every answer says 5; before, s0's 1 may pass.
	seen5 := false
	for _, s := range got {
		if s == 5 {
			seen5 = true
		} else if seen5 {
			t.Fatalf("serial %d presented after 5 was seen: %v", s, got)
		}
	}
	if !seen5 {
		t.Fatalf("serials %v", got)
	}
	var s serials
	if s.observe("z.", 0xfffffff0) != 0xfffffff0 || s.observe("z.", 3) != 3 || s.observe("z.", 0xfffffff5) != 3 {
		t.Fatal("serial order is not RFC 1982's")
	}
}
