package fsm

import (
	"testing"

	"github.com/miekg/dns"
)

func TestCommandRoundTrip(t *testing.T) {
	c := &Command{Op: OpChange, ID: 42, Zone: "example.org.", Import: 7, Absent: true,
		Add: []dns.RR{mustRR(t, "www.example.org. 60 IN A 192.0.2.1"), mustRR(t, `t.example.org. 60 IN TXT "a b" "c"`)},
		Del: []Deletion{{RR: mustRR(t, "x.example.org. 60 IN AAAA 2001:db8::1")}, {Name: "y.example.org.", Type: dns.TypeMX}, {Name: "z.example.org."}}}
	b, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Op != c.Op || got.ID != c.ID || got.Zone != c.Zone || got.Import != c.Import || !got.Absent {
		t.Errorf("expected %+v, got %+v", c, got)
	}
	if len(got.Add) != 2 || got.Add[1].String() != c.Add[1].String() {
		t.Errorf("expected adds %v, got %v", c.Add, got.Add)
	}
	if len(got.Del) != 3 || got.Del[0].RR.String() != c.Del[0].RR.String() || got.Del[1].Type != dns.TypeMX || got.Del[2].Name != "z.example.org." {
		t.Errorf("expected deletions %v, got %v", c.Del, got.Del)
	}
	for i := 0; i < len(b); i++ {
		if _, err := Unmarshal(b[:i]); err == nil {
			t.Fatalf("expected an error for a command cut at %d bytes", i)
		}
	}
}

func TestNameKeyOrder(t *testing.T) {
	names := []string{".", "org.", "example.org.", "a.example.org.", "*.a.example.org.", "b.a.example.org.", "ab.example.org.", "z.example.org."}
	for i := 1; i < len(names); i++ {
		a, b := string(nameKey(names[i-1])), string(nameKey(names[i]))
		if a >= b {
			t.Errorf("expected %q before %q in key order", names[i-1], names[i])
		}
	}
	if string(nameKey("WWW.Example.ORG")) != string(nameKey("www.example.org.")) {
		t.Error("expected keys to ignore case")
	}
}

// TestOpNumbers: an op's number is in every log entry and snapshot; it
// never changes, and the transaction ops are the ones whose encoding
// carries the transaction fields.
func TestOpNumbers(t *testing.T) {
	ops := []Op{OpChange, OpImportBegin, OpImportChunk, OpImportCommit, OpDeleteZone, OpMemberInfo, OpUpdate,
		OpTxPrepare, OpTxCommit, OpTxAbort, OpTxDecide, OpTxFence, OpTxUnfence, OpMapSet, OpKeys}
	for i, o := range ops {
		if int(o) != i+1 {
			t.Errorf("op %d has number %d: numbers are on disk and never change", i+1, o)
		}
		if want := o >= OpTxPrepare && o <= OpTxUnfence; o.IsTx() != want {
			t.Errorf("op %d: IsTx %v, expected %v", o, o.IsTx(), want)
		}
	}
	c := &Command{Op: OpTxDecide, Tx: [16]byte{1, 2, 3}, Time: 99, Outcome: OutcomeAbort}
	b, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Unmarshal(b)
	if err != nil || got.Tx != c.Tx || got.Time != 99 || got.Outcome != OutcomeAbort {
		t.Errorf("a transaction command round trip: %+v %v", got, err)
	}
}
