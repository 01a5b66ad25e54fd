package harness

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// A second TSIG key of the update cluster, allowed to write only the ACME
// challenge TXT record (the first is Corefile.examples/keys/update.key).
const (
	ACMEKey    = "acme."
	ACMESecret = "c2VjcmV0LW9mLXRoZS1hY21lLWtleS1mb3ItdGVzdHM="
)

// UpdateCluster is three craftstore members on free loopback ports that take
// RFC 2136 updates for example.org as Corefile.examples/cluster/ does: TSIG
// through the tsig plugin with the example key file, `allow update. * *`,
// plus the ACME key allowed only the ACME challenge TXT record.
type UpdateCluster struct {
	WD    string   // working directory (Workdir)
	Procs []*Proc  // member i+1
	DNS   []string // DNS address of member i+1
	API   []API    // API of member i+1
	Ready []string // URL of member i+1's ready endpoint
}

// StartUpdateCluster starts the three members and waits until each is ready
// and serves the seeded example.org.
func StartUpdateCluster(t *testing.T) *UpdateCluster {
	t.Helper()
	c := &UpdateCluster{WD: Workdir(t)}
	var raft, ready []int
	for i := 0; i < 3; i++ {
		c.DNS = append(c.DNS, fmt.Sprintf("127.0.0.1:%d", ListenPort(t)))
		c.API = append(c.API, API{Base: fmt.Sprintf("http://127.0.0.1:%d", ListenPort(t))})
		raft = append(raft, ListenPort(t))
		ready = append(ready, ListenPort(t))
	}
	for i := 0; i < 3; i++ {
		corefile := fmt.Sprintf(`example.org:%s {
    bind 127.0.0.1
    tsig {
        secrets Corefile.examples/keys/update.key
        secret %s %s
        require_opcode UPDATE
    }
    craftstore {
        id %d
        data data/m%d
        peer 1 127.0.0.1:%d
        peer 2 127.0.0.1:%d
        peer 3 127.0.0.1:%d
        seed example.org Corefile.examples/zones/example.org.zone
        api %s
        allow update. * *
        allow %s _acme-challenge.example.org. TXT
    }
    ready 127.0.0.1:%d {
        monitor continuously
    }
    errors
}
`, Port(c.DNS[i]), ACMEKey, ACMESecret, i+1, i+1, raft[0], raft[1], raft[2],
			strings.TrimPrefix(c.API[i].Base, "http://"), ACMEKey, ready[i])
		name := fmt.Sprintf("m%d", i+1)
		if err := os.WriteFile(filepath.Join(c.WD, name+".Corefile"), []byte(corefile), 0o644); err != nil {
			t.Fatal(err)
		}
		c.Procs = append(c.Procs, Start(t, name, c.WD, name+".Corefile"))
	}
	for i := 0; i < 3; i++ {
		c.Ready = append(c.Ready, fmt.Sprintf("http://127.0.0.1:%d/ready", ready[i]))
		WaitReady(t, c.Ready[i], c.Procs...)
	}
	for i := 1; i <= 3; i++ {
		Eventually(t, fmt.Sprintf("the seeded zone on member %d", i), 20*time.Second, func() bool {
			return HasA(c.Addr(i), "www.example.org", "192.0.2.10")
		})
	}
	return c
}

// Port returns the port of a host:port address.
func Port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// Addr is the DNS address of member i (1-based).
func (c *UpdateCluster) Addr(i int) string { return c.DNS[i-1] }

// Leader returns the leader's member id.
func (c *UpdateCluster) Leader(t *testing.T) int {
	t.Helper()
	var st struct{ Leader uint64 }
	Eventually(t, "a leader", 20*time.Second, func() bool {
		code, err := c.API[0].Do("GET", "/v1/cluster", nil, &st)
		return err == nil && code == 200 && st.Leader >= 1 && st.Leader <= 3
	})
	return int(st.Leader)
}

// Serial returns the SOA serial of example.org on member i.
func (c *UpdateCluster) Serial(t *testing.T, i int) uint32 {
	t.Helper()
	r, err := Query(c.Addr(i), "example.org", dns.TypeSOA)
	if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("expected the SOA from member %d, got %v %v", i, r, err)
	}
	return r.Answer[0].(*dns.SOA).Serial
}

// Converged waits until every member has serial.
func (c *UpdateCluster) Converged(t *testing.T, serial uint32) {
	t.Helper()
	for i := 1; i <= 3; i++ {
		Eventually(t, fmt.Sprintf("serial %d on member %d", serial, i), 10*time.Second, func() bool {
			r, err := Query(c.Addr(i), "example.org", dns.TypeSOA)
			return err == nil && len(r.Answer) == 1 && r.Answer[0].(*dns.SOA).Serial == serial
		})
	}
}

// Rdata returns the rdata of addr's answer for name/qtype, sorted and joined
// by spaces, or the rcode's name when it is not NOERROR, or "NODATA".
func Rdata(t *testing.T, addr, name string, qtype uint16) string {
	t.Helper()
	r, err := Query(addr, name, qtype)
	if err != nil {
		t.Fatalf("query %s %s at %s: %v", name, dns.TypeToString[qtype], addr, err)
	}
	if r.Rcode != dns.RcodeSuccess {
		return dns.RcodeToString[r.Rcode]
	}
	var out []string
	for _, rr := range r.Answer {
		if rr.Header().Rrtype == qtype {
			out = append(out, strings.TrimPrefix(rr.String(), rr.Header().String()))
		}
	}
	if len(out) == 0 {
		return "NODATA"
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// Everywhere waits up to 10s per member until every member answers
// name/qtype with want (see Rdata), and fails the test otherwise.
func (c *UpdateCluster) Everywhere(t *testing.T, name string, qtype uint16, want string) {
	t.Helper()
	for i := 1; i <= 3; i++ {
		var got string
		deadline := time.Now().Add(10 * time.Second)
		for {
			if got = Rdata(t, c.Addr(i), name, qtype); got == want || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if got != want {
			t.Fatalf("expected %s %s on member %d to be %q, got %q", name, dns.TypeToString[qtype], i, want, got)
		}
	}
}
