package replica

import (
	"fmt"
	"slices"
	"testing"

	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"
	"github.com/craftdns/craftdns/plugin/craftstore/zone"

	"github.com/miekg/dns"
)

func TestCoalesce(t *testing.T) {
	a := func(name, ip string) zone.NameRecords {
		if ip == "" {
			return zone.NameRecords{Name: name} // the name's records removed
		}
		rr, err := dns.NewRR(name + " 300 IN A " + ip)
		if err != nil {
			t.Fatal(err)
		}
		return zone.NameRecords{Name: name, RRs: []dns.RR{rr}}
	}
	change := func(z string, base uint32, names ...zone.NameRecords) *fsm.Effect {
		return &fsm.Effect{Zone: z, Names: names, Base: base, HasBase: true}
	}
	tx := &fsm.Effect{Zone: "a.", Tx: &fsm.TxEffect{}}
	member := &fsm.Effect{Member: &Member{ID: 4}}
	e1 := change("a.", 1, a("x.a.", "192.0.2.1"), a("y.a.", "192.0.2.2"))
	e2 := change("a.", 2, a("x.a.", ""), a("z.a.", "192.0.2.3"))
	e3 := change("a.", 3, a("x.a.", "192.0.2.4"))
	f1 := change("b.", 7, a("x.b.", "192.0.2.5"))

	shape := func(effects []*fsm.Effect) string {
		s := ""
		for _, e := range effects {
			switch {
			case e.Tx != nil:
				s += "[tx]"
			case e.Member != nil:
				s += "[member]"
			default:
				s += fmt.Sprintf("[%s %d names base %d]", e.Zone, len(e.Names), e.Base)
			}
		}
		return s
	}
	for _, tc := range []struct {
		in   []*fsm.Effect
		want string
	}{
		{nil, ""},
		{[]*fsm.Effect{e1}, "[a. 2 names base 1]"},
		{[]*fsm.Effect{e1, e2, e3}, "[a. 5 names base 3]"},
		{[]*fsm.Effect{e1, f1, e2}, "[a. 2 names base 1][b. 1 names base 7][a. 2 names base 2]"},
		{[]*fsm.Effect{e1, e2, tx, e3}, "[a. 4 names base 2][tx][a. 1 names base 3]"},
		{[]*fsm.Effect{member, e1, e2, f1}, "[member][a. 4 names base 2][b. 1 names base 7]"},
	} {
		if got := shape(coalesce(tc.in)); got != tc.want {
			t.Errorf("coalesce(%s) = %s, want %s", shape(tc.in), got, tc.want)
		}
	}
	// The effects themselves are left as they were.
	if shape([]*fsm.Effect{e1, e2, e3}) != "[a. 2 names base 1][a. 2 names base 2][a. 1 names base 3]" {
		t.Errorf("coalesce changed its input: %s", shape([]*fsm.Effect{e1, e2, e3}))
	}

	// One write of the merged names leaves the zone as the writes one by one do.
	one, each := zone.New("a."), zone.New("a.")
	for _, e := range []*fsm.Effect{e1, e2, e3} {
		each.Set(e.Names)
	}
	merged := coalesce([]*fsm.Effect{e1, e2, e3})
	one.Set(merged[0].Names)
	for _, name := range []string{"x.a.", "y.a.", "z.a."} {
		got, want := one.RRs(name, dns.TypeA), each.RRs(name, dns.TypeA)
		if !slices.EqualFunc(got, want, dns.IsDuplicate) || len(got) != 1 {
			t.Errorf("%s: one write %v, one by one %v", name, got, want)
		}
	}
	if one.Records() != each.Records() {
		t.Errorf("records: one write %d, one by one %d", one.Records(), each.Records())
	}
}
