package shardproto

import (
	"testing"

	"github.com/miekg/dns"
)

// TestEpoch: a query carries the router's epoch and whether it was sent to
// the owner, set again replaces it, and an answer carries the member's
// epoch and whether it fenced the query; Strip removes it.
func TestEpoch(t *testing.T) {
	q := new(dns.Msg)
	q.SetQuestion("a.example.org.", dns.TypeA)
	if e, _ := RoutedEpoch(q); e != 0 {
		t.Fatalf("no option: epoch %d", e)
	}
	SetEpoch(q, 0, true)
	if q.IsEdns0() != nil {
		t.Error("epoch 0 added an OPT record")
	}
	SetEpoch(q, 7, true)
	SetEpoch(q, 9, false)
	if e, owner := RoutedEpoch(q); e != 9 || owner {
		t.Errorf("RoutedEpoch: %d %v, expected 9 false", e, owner)
	}
	if n := len(q.IsEdns0().Option); n != 1 {
		t.Errorf("%d options after two SetEpoch, expected 1", n)
	}
	SetEpoch(q, 9, true)
	if _, owner := RoutedEpoch(q); !owner {
		t.Error("the owner flag was lost")
	}

	a := new(dns.Msg)
	a.SetReply(q)
	if _, _, ok := AnswerEpoch(a); ok {
		t.Error("an answer without the option has an epoch")
	}
	AttachEpoch(a, 12, true)
	if e, fenced, ok := AnswerEpoch(a); !ok || e != 12 || !fenced {
		t.Errorf("AnswerEpoch: %d %v %v", e, fenced, ok)
	}
	AttachEpoch(a, 12, false)
	if _, fenced, _ := AnswerEpoch(a); fenced {
		t.Error("a notice reads as fenced")
	}
	Strip(a)
	if _, _, ok := AnswerEpoch(a); ok {
		t.Error("Strip left the epoch")
	}
	// A malformed option is no epoch.
	bad := new(dns.Msg)
	bad.SetQuestion("a.example.org.", dns.TypeA)
	bad.SetEdns0(1232, false)
	bad.IsEdns0().Option = append(bad.IsEdns0().Option, &dns.EDNS0_LOCAL{Code: EpochCode, Data: []byte{1, 2, 3}})
	if e, _ := RoutedEpoch(bad); e != 0 {
		t.Errorf("a 3-byte option read as epoch %d", e)
	}
}
