package shardproto

import (
	"testing"
	"time"

	"github.com/miekg/dns"
)

// FuzzOptions: every reader of the private EDNS0 options (partition facts
// and modes, change leases and notices, serials, applied indexes) takes
// any message a peer may send, and a message it accepts rewritten by the
// writers reads back alike; never a panic.
func FuzzOptions(f *testing.F) {
	pack := func(m *dns.Msg) []byte {
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	q := new(dns.Msg)
	q.SetQuestion("www.example.org.", dns.TypeA)
	q.SetEdns0(1232, false)
	Request(q)
	f.Add(pack(q))
	a := new(dns.Msg)
	a.SetReply(q)
	Attach(a, Facts{Kind: Absent, Labels: 2, Wildcard: true, Origin: "example.org."})
	AttachSerial(a, "example.org.", 7, 3)
	AttachIndex(a, 42)
	f.Add(pack(a))
	key := NewKey("fuzz-key")
	l := new(dns.Msg)
	l.SetQuestion("example.org.", dns.TypeSOA)
	l.SetEdns0(1232, false)
	lease := RequestLease(l, Lease{Port: 1053, Duration: time.Second, Token: [TokenLen]byte{1, 2}, Time: time.Now()}, key)
	f.Add(pack(l))
	g := new(dns.Msg)
	g.SetReply(l)
	GrantLease(g, lease, 7, key)
	f.Add(pack(g))
	notice, _ := Notice{Zone: "example.org.", Change: Records, Names: []string{"www.example.org."}, Index: 9, Serial: 4, Base: 1}.Msg("example.org.", lease, key)
	f.Add(pack(notice))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := new(dns.Msg)
		if m.Unpack(data) != nil {
			return
		}
		if facts, err := Parse(m); err == nil {
			back := m.Copy()
			Strip(back)
			Attach(back, facts)
			if got, err := Parse(back); err != nil || got != facts {
				t.Fatalf("facts %+v attached again read as %+v, %v", facts, got, err)
			}
		}
		if n, nl, ok := NoticeOf(m, key); ok {
			again, _ := n.Msg(m.Question[0].Name, nl, key)
			if got, gl, ok := NoticeOf(again, key); !ok || gl.Token != nl.Token || !gl.Time.Equal(nl.Time) || got.Zone != n.Zone || got.Index != n.Index || len(got.Names) != len(n.Names) {
				t.Fatalf("notice %+v written again read as %+v (%v)", n, got, ok)
			}
		}
		if got, ok := LeaseRequested(m, key); ok {
			if _, granted := LeaseGranted(m, got, key); granted {
				t.Fatal("a lease request taken for its grant")
			}
		}
		LeaseGranted(m, lease, key)
		NoticeAcked(m, Notice{}, key)
		AnswerSigned(m, key)
		IsNotice(m)
		IsLeaseRequest(m)
		SerialOf(m)
		IndexOf(m)
		MinIndex(m)
		Requested(m)
		Routed(m)
		StaleAllowed(m)
		if len(m.Question) == 1 {
			AllowStale(m)
		}
		Strip(m)
	})
}
