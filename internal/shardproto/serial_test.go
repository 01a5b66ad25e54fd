package shardproto

import (
	"testing"

	"github.com/miekg/dns"
)

func TestAttachSerial(t *testing.T) {
	m := new(dns.Msg)
	m.SetQuestion("example.org.", dns.TypeSOA)
	if AttachSerial(m, "example.org.", 1, 1); len(m.Extra) != 0 {
		t.Fatal("attached to a message without OPT")
	}
	m.SetEdns0(1232, false)
	AttachIndex(m, 42)
	AttachSerial(m, "Example.ORG.", 4294967295, 7)
	w := wire(t, m)
	zone, serial, base, ok := SerialOf(w)
	if !ok || zone != "Example.ORG." || serial != 4294967295 || base != 7 {
		t.Errorf("got %q %d %d %v", zone, serial, base, ok)
	}
	Strip(w)
	if _, _, _, ok := SerialOf(w); ok || len(w.IsEdns0().Option) != 0 {
		t.Errorf("Strip left %v", w.IsEdns0().Option)
	}
	// Malformed: a name that runs past the end.
	bad := new(dns.Msg)
	bad.SetEdns0(1232, false)
	bad.IsEdns0().Option = append(bad.IsEdns0().Option, &dns.EDNS0_LOCAL{Code: SerialCode, Data: []byte{0, 0, 0, 1, 0, 0, 0, 1, 7, 'e'}})
	if _, _, _, ok := SerialOf(bad); ok {
		t.Error("a malformed option was read")
	}
}
