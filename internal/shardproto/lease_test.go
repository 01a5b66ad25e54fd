package shardproto

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestLease(t *testing.T) {
	key, other := NewKey("router key"), NewKey("another key")
	m := new(dns.Msg)
	m.SetQuestion(".", dns.TypeSOA)
	if _, ok := LeaseRequested(m, key); ok || IsLeaseRequest(m) {
		t.Fatal("a plain query is no lease request")
	}
	asked := time.Now()
	sent := RequestLease(m, Lease{Port: 1053, Duration: time.Hour, Token: [TokenLen]byte{1, 2, 3, 4, 5, 6, 7, 8}, Time: asked}, key)
	w := wire(t, m)
	got, ok := LeaseRequested(w, key)
	if !ok || got.Port != 1053 || got.Duration != MaxLease || got.Token != sent.Token || got.Time.UnixMilli() != asked.UnixMilli() || got.MAC != sent.MAC {
		t.Errorf("got %+v, %v; want %+v (duration capped)", got, ok, sent)
	}
	if !IsLeaseRequest(w) {
		t.Error("IsLeaseRequest: false for a lease request")
	}
	if _, ok := MinIndex(w); ok || Requested(w) {
		t.Error("a lease request is neither a partition-mode nor a fresh query")
	}
	// Another key, no key, another name or a changed field: no lease.
	if _, ok := LeaseRequested(w, other); ok {
		t.Error("a request signed with another key was taken")
	}
	if _, ok := LeaseRequested(w, nil); ok {
		t.Error("a member without a key took a request")
	}
	renamed := w.Copy()
	renamed.Question[0].Name = "example.org."
	if _, ok := LeaseRequested(renamed, key); ok {
		t.Error("a request for another name was taken")
	}
	forged := w.Copy()
	forged.IsEdns0().Option[0].(*dns.EDNS0_LOCAL).Data[4]++ // the port
	if _, ok := LeaseRequested(forged, key); ok {
		t.Error("a request with a changed port was taken")
	}
	unsigned := new(dns.Msg)
	unsigned.SetQuestion(".", dns.TypeSOA)
	RequestLease(unsigned, Lease{Port: 1053, Duration: time.Second, Time: asked}, nil)
	if _, ok := LeaseRequested(wire(t, unsigned), key); ok || !IsLeaseRequest(unsigned) {
		t.Error("an unsigned request was taken")
	}

	// The grant: signed over the request and the index.
	g := new(dns.Msg)
	g.SetReply(w)
	GrantLease(g, got, 42, key)
	gw := wire(t, g)
	if idx, ok := LeaseGranted(gw, sent, key); !ok || idx != 42 {
		t.Errorf("grant: got %d %v", idx, ok)
	}
	if _, ok := LeaseGranted(gw, sent, other); ok {
		t.Error("a grant under another key was taken")
	}
	again := sent
	again.Time = asked.Add(time.Millisecond)
	if _, ok := LeaseGranted(gw, again, key); ok {
		t.Error("a grant for an earlier request was taken for a later one")
	}
	raised := gw.Copy()
	for _, o := range raised.IsEdns0().Option {
		if l := o.(*dns.EDNS0_LOCAL); l.Code == IndexCode {
			l.Data[7]++
		}
	}
	if _, ok := LeaseGranted(raised, sent, key); ok {
		t.Error("a grant with a changed index was taken")
	}
	if _, ok := LeaseGranted(w, sent, key); ok {
		t.Error("the request was taken for its grant")
	}
}

func TestNotice(t *testing.T) {
	key, other := NewKey("router key"), NewKey("another key")
	l := Lease{Port: 1053, Duration: time.Second, Token: [TokenLen]byte{9, 8, 7, 6, 5, 4, 3, 2}, Time: time.UnixMilli(1_700_000_000_123)}
	names := []string{"a.example.org.", "*.b.example.org."}
	msg, sent := Notice{Zone: "example.org.", Change: Records, Names: names, Index: 7, Serial: 4294967295, Base: 12}.Msg("router.zone.", l, key)
	m := wire(t, msg)
	if m.Question[0].Name != "router.zone." || m.Opcode != dns.OpcodeNotify || !IsNotice(m) {
		t.Errorf("expected a NOTIFY for the lease query's name, got %v", m.Question)
	}
	n, nl, ok := NoticeOf(m, key)
	if !ok || n.Zone != "example.org." || n.Change != Records || !slices.Equal(n.Names, names) || nl.Token != l.Token || !nl.Time.Equal(l.Time) ||
		n.Index != 7 || n.Serial != 4294967295 || n.Base != 12 || n.MAC != sent.MAC {
		t.Errorf("got %+v %+v %v", n, nl, ok)
	}
	if _, _, ok := NoticeOf(m, other); ok {
		t.Error("a notice signed with another key was taken")
	}
	if _, _, ok := NoticeOf(m, nil); ok {
		t.Error("a notice taken without a key")
	}
	for i, change := range []func(*dns.Msg){
		func(m *dns.Msg) { m.Question[0].Name = "other.zone." },
		func(m *dns.Msg) { m.IsEdns0().Option[0].(*dns.EDNS0_LOCAL).Data[2] = byte(ZoneDeleted) },
		func(m *dns.Msg) { d := m.IsEdns0().Option[0].(*dns.EDNS0_LOCAL).Data; d[len(d)-2]++ }, // a name
	} {
		c := m.Copy()
		change(c)
		if _, _, ok := NoticeOf(c, key); ok {
			t.Errorf("change %d: a changed notice was taken", i)
		}
	}
	// The router's answer covers the notice.
	ack := new(dns.Msg)
	ack.SetReply(m)
	AckNotice(ack, n, key)
	if aw := wire(t, ack); !NoticeAcked(aw, sent, key) || NoticeAcked(aw, sent, other) {
		t.Error("the answer to the notice is not taken under the key, or is under another")
	}
	plain := new(dns.Msg)
	plain.SetReply(m)
	if NoticeAcked(plain, sent, key) {
		t.Error("an unsigned NOERROR was taken for the router's answer")
	}
	_, second := Notice{Zone: "example.org.", Change: Records, Index: 8}.Msg("router.zone.", l, key)
	if NoticeAcked(wire(t, ack), second, key) {
		t.Error("the answer to one notice was taken for another's")
	}

	// Too many names: the whole zone.
	var many []string
	for i := range maxNoticeNames + 1 {
		many = append(many, fmt.Sprintf("n%d.example.org.", i))
	}
	mm, _ := Notice{Zone: "example.org.", Change: Records, Names: many}.Msg(".", l, key)
	if n, _, ok := NoticeOf(wire(t, mm), key); !ok || n.Names != nil {
		t.Errorf("expected a whole-zone notice for %d names, got %v %v", len(many), n.Names, ok)
	}
	// Zone changes carry no names.
	zm, _ := Notice{Zone: "example.org.", Change: ZoneDeleted, Names: names}.Msg(".", l, key)
	if n, _, ok := NoticeOf(wire(t, zm), key); !ok || n.Change != ZoneDeleted || n.Names != nil {
		t.Errorf("got %+v %v", n, ok)
	}
	// A query is no notice.
	q := new(dns.Msg)
	q.SetQuestion("example.org.", dns.TypeSOA)
	Request(q)
	if _, _, ok := NoticeOf(q, key); ok || IsNotice(q) {
		t.Error("a query taken for a notice")
	}
}

// routedAnswer is an answer to a routed query with the member's applied
// index and zone serial.
func routedAnswer() *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion("www.example.org.", dns.TypeA)
	m.SetEdns0(1232, false)
	AttachIndex(m, 42)
	AttachSerial(m, "example.org.", 7, 3)
	return m
}

// TestSignAnswer: a routed answer's index and serial are taken only under
// the key, and not once changed.
func TestSignAnswer(t *testing.T) {
	key := NewKey("router key")
	m := routedAnswer()
	if AnswerSigned(m, key) {
		t.Fatal("an unsigned answer taken as signed")
	}
	SignAnswer(m, key)
	w := wire(t, m)
	if !AnswerSigned(w, key) || AnswerSigned(w, NewKey("other")) || AnswerSigned(w, nil) {
		t.Error("a signed answer: taken under the wrong key, or not under its own")
	}
	for _, code := range []uint16{IndexCode, SerialCode} {
		c := w.Copy()
		for _, o := range c.IsEdns0().Option {
			if l := o.(*dns.EDNS0_LOCAL); l.Code == code {
				l.Data[3]++
			}
		}
		if AnswerSigned(c, key) {
			t.Errorf("option %d changed, yet the answer is taken as signed", code)
		}
	}
	// An index alone signed does not pass for an answer with a serial.
	only := new(dns.Msg)
	only.SetQuestion("www.example.org.", dns.TypeA)
	only.SetEdns0(1232, false)
	AttachIndex(only, 42)
	SignAnswer(only, key)
	AttachSerial(only, "example.org.", 7, 3)
	if AnswerSigned(wire(t, only), key) {
		t.Error("a serial added after the signature was taken")
	}
	Strip(w)
	if len(w.IsEdns0().Option) != 0 {
		t.Errorf("Strip left %v", w.IsEdns0().Option)
	}
}

// BenchmarkSignAnswer is what a member spends on a routed answer it signs,
// and a router on checking one.
func BenchmarkSignAnswer(b *testing.B) {
	key := NewKey("router key")
	m := routedAnswer()
	opts := m.IsEdns0().Option
	b.ReportAllocs()
	for b.Loop() {
		m.IsEdns0().Option = opts
		SignAnswer(m, key)
		if !AnswerSigned(m, key) {
			b.Fatal("not signed")
		}
	}
}
