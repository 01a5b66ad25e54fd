package craftroute

import (
	"context"
	"testing"
	"time"

	"github.com/craftdns/craftdns/internal/dnsdiff"
	"github.com/craftdns/craftdns/internal/shardproto"
	"github.com/craftdns/craftdns/plugin/craftstore/zone"

	"github.com/miekg/dns"
)

// setSerial gives shard the zone's records with SOA serial and base, as a
// member that took serial−base changes since the zone was given base.
func setSerial(t *testing.T, c *Craftroute, shard string, serial, base uint32) {
	t.Helper()
	var apex []dns.RR
	for _, rr := range dnsdiff.ParseZone(t, "example.org.", serveZone) {
		if soa, ok := rr.(*dns.SOA); ok {
			soa.Serial = serial
		}
		if rr.Header().Name == "example.org." {
			apex = append(apex, rr)
		}
	}
	z := c.ex.(memShards)[shard]
	z.Set([]zone.NameRecords{{Name: "example.org.", RRs: apex}})
	z.SetSerialBase(base)
}

// presented resolves an SOA query and a query for a name that does not
// exist, and returns the serials of the SOA records of both answers.
func presented(t *testing.T, c *Craftroute) []uint32 {
	t.Helper()
	var got []uint32
	for _, name := range []string{"example.org.", "nx.example.org."} {
		r := new(dns.Msg)
		r.SetQuestion(name, dns.TypeSOA)
		resp, err := c.resolve(context.Background(), r, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, rr := range append(resp.Answer, resp.Ns...) {
			if soa, ok := rr.(*dns.SOA); ok {
				got = append(got, soa.Serial)
			}
		}
	}
	return got
}

// TestSerialPresented: shards of a key-mode-name zone keep their own
// serials; the router presents the highest base plus every shard's changes
// since its base, whichever shard answered, and never goes back.
func TestSerialPresented(t *testing.T) {
	c, _ := testRouter(t, "example.org.", serveZone, 2)
	steps := []struct {
		what   string
		shard  string
		serial uint32
		base   uint32
		want   uint32
	}{
		{"imported at 1", "", 0, 0, 1},
		{"two changes on s0", "s0", 3, 1, 3},
		{"four changes on s1", "s1", 5, 1, 7},
		{"one more on s0", "s0", 4, 1, 8},
		{"s1 given 100 explicitly", "s1", 100, 100, 103},
		{"s1 lowered by hand: never back", "s1", 2, 1, 103},
		{"s1 given 200", "s1", 201, 200, 204},
	}
	for _, st := range steps {
		if st.shard != "" {
			setSerial(t, c, st.shard, st.serial, st.base)
		}
		got := presented(t, c)
		if len(got) != 2 || got[0] != st.want || got[1] != st.want {
			t.Errorf("%s: expected serial %d in both answers, got %v", st.what, st.want, got)
		}
	}
}

// TestSerialSum: RFC 1982 arithmetic, a shard heard of with an older state
// is ignored, and the shards to ask.
func TestSerialSum(t *testing.T) {
	var s serials
	now := time.Now()
	base := uint32(0xfffffff0)
	s.observe("z.", "a", base+5, base, now)
	s.observe("z.", "b", base+20, base, now) // past zero
	if got, ok := s.serial("z."); !ok || got != base+25 {
		t.Errorf("expected %d, got %d %v", base+25, got, ok)
	}
	s.observe("z.", "b", base+10, base, now) // an older answer
	if got, _ := s.serial("z."); got != base+25 {
		t.Errorf("an older state counted: %d", got)
	}
	shards := []*Shard{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	if _, _, m := s.current("z.", shards, time.Time{}); len(m) != 1 || m[0].Name != "c" {
		t.Errorf("expected c missing, got %v", m)
	}
	if _, _, m := s.current("z.", shards, now.Add(time.Second)); len(m) != 3 {
		t.Errorf("expected every shard not heard from since to be asked, got %v", m)
	}
	if _, ok := s.serial("other."); ok {
		t.Error("a serial for a zone never heard of")
	}
	s.forget("z.")
	s.observe("z.", "a", 1, 1, now)
	if got, _ := s.serial("z."); got != 1 {
		t.Errorf("a deleted zone starts again: expected 1, got %d", got)
	}
}

// tamperingShards changes the serial and the index in its shards' answers
// after the member signed them, as a forger on the path would.
type tamperingShards struct{ exchanger }

func (s tamperingShards) exchange(ctx context.Context, sh *Shard, req *dns.Msg) (*dns.Msg, error) {
	resp, err := s.exchanger.exchange(ctx, sh, req)
	if err != nil {
		return resp, err
	}
	if opt := resp.IsEdns0(); opt != nil {
		for _, o := range opt.Option {
			if l, ok := o.(*dns.EDNS0_LOCAL); ok && l.Code == shardproto.SerialCode {
				l.Data[0] = 0xf0 // a serial far ahead
			}
		}
	}
	shardproto.AttachIndex(resp, 1<<40)
	return resp, nil
}

// TestTamperedAnswerIgnored: a serial or an applied index that a member did
// not sign (here changed after it signed) is not kept: the router presents
// the shards' real serial and asks for no index it was not told of.
func TestTamperedAnswerIgnored(t *testing.T) {
	c, _ := testRouter(t, "example.org.", serveZone, 2)
	holdLeases(c)
	c.ex = tamperingShards{c.ex}
	if got := presented(t, c); len(got) != 2 || got[0] != 1 || got[1] != 1 {
		t.Errorf("expected the real serial 1 in both answers, got %v", got)
	}
	for _, s := range c.shards() {
		if idx := s.minIndex.Load(); idx != 0 {
			t.Errorf("shard %s: a forged index %d was kept", s.Name, idx)
		}
	}
}
