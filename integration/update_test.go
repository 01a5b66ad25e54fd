package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
	"github.com/craftdns/craftdns/internal/ede"

	"github.com/miekg/dns"
)

// The key in Corefile.examples/keys/update.key, and a second key that may
// only write the ACME challenge TXT record.
const (
	updateKey    = "update."
	updateSecret = "9ATHUKEK1AtZp8igg3qMeaLM1Y2Q3iBGRyWOyERsKXY="
	acmeKey      = harness.ACMEKey
	acmeSecret   = harness.ACMESecret
	wrongSecret  = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
)

// updater is an RFC 2136 command-line client: nsupdate or knsupdate. Both
// read the same commands (server, zone, prereq ..., update ..., send) on
// standard input, take -v for TCP and -y [alg:]name:secret; only their key
// files differ.
type updater struct {
	name    string
	bin     string
	keyfile string // the example key in the client's own format
}

func newUpdater(t *testing.T, tool, wd string) updater {
	u := updater{name: tool, bin: harness.RequireTool(t, tool)}
	switch tool {
	case "nsupdate":
		u.keyfile = "Corefile.examples/keys/update.key" // BIND's format
	case "knsupdate":
		// knsupdate -k reads what -y takes, not BIND's key file: the
		// example key in that form, which must be the same key.
		u.keyfile = "Corefile.examples/keys/update.tsig"
		b, err := os.ReadFile(filepath.Join(harness.Repo, u.keyfile))
		if err != nil {
			t.Fatal(err)
		}
		if want := knotKey(t, filepath.Join(harness.Repo, "Corefile.examples/keys/update.key")); strings.TrimSpace(string(b)) != want {
			t.Fatalf("%s holds %q; update.key is %q", u.keyfile, strings.TrimSpace(string(b)), want)
		}
	}
	return u
}

// updaterOrGo is newUpdater for a test that needs the client only for some
// of its checks: without the tool (outside CI, where RequireTool fails the
// test) its updates are sent by sendUpdate instead, and the rest of the
// test runs as it is.
func updaterOrGo(t *testing.T, tool string) updater {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil && os.Getenv("CI") != "true" {
		t.Logf("%s is not installed: its updates are sent with miekg/dns, signed with the example key", tool)
		return updater{name: tool + " (miekg/dns)", keyfile: "Corefile.examples/keys/update.key"}
	}
	return newUpdater(t, tool, "")
}

// sendUpdate sends the "update add NAME TTL TYPE RDATA" commands of body for
// zone to addr over TCP, signed with the example key (as nsupdate -k
// Corefile.examples/keys/update.key), and returns the rcode's name and
// whether it is NOERROR.
func sendUpdate(t *testing.T, addr, zone, body string) (string, bool) {
	t.Helper()
	parts := strings.SplitN(knotKey(t, filepath.Join(harness.Repo, "Corefile.examples/keys/update.key")), ":", 3)
	alg, name, secret := parts[0], parts[1], parts[2]
	m := new(dns.Msg)
	m.SetUpdate(dns.Fqdn(zone))
	for _, line := range strings.Split(strings.TrimSpace(body), "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "update add ")
		if !ok {
			t.Fatalf("sendUpdate takes only update add lines, not %q", line)
		}
		rr, err := dns.NewRR(rest)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		m.Insert([]dns.RR{rr})
	}
	key := dns.Fqdn(name)
	m.SetTsig(key, dns.Fqdn(alg), 300, time.Now().Unix())
	c := &dns.Client{Net: "tcp", Timeout: 10 * time.Second, TsigSecret: map[string]string{key: secret}}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		return err.Error(), false
	}
	return dns.RcodeToString[r.Rcode], r.Rcode == dns.RcodeSuccess
}

// knotKey converts a BIND key file to knsupdate's alg:name:secret.
func knotKey(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var name, alg, secret string
	for _, f := range strings.FieldsFunc(string(b), func(r rune) bool { return r == '\n' || r == ';' || r == '{' }) {
		fields := strings.Fields(f)
		switch {
		case len(fields) == 2 && fields[0] == "key":
			name = strings.Trim(fields[1], `"`)
		case len(fields) == 2 && fields[0] == "algorithm":
			alg = fields[1]
		case len(fields) == 2 && fields[0] == "secret":
			secret = strings.Trim(fields[1], `"`)
		}
	}
	if name == "" || alg == "" || secret == "" {
		t.Fatalf("expected a key, algorithm and secret in %s", path)
	}
	return alg + ":" + name + ":" + secret
}

// send runs the client with args, the commands of body for zone sent to
// addr, and returns its output and whether it succeeded.
func (u updater) send(t *testing.T, wd, addr, zone string, args []string, body string) (string, bool) {
	t.Helper()
	if u.bin == "" {
		return sendUpdate(t, addr, zone, body)
	}
	host, p, _ := net.SplitHostPort(addr)
	script := fmt.Sprintf("server %s %s\nzone %s\n%s\nsend\n", host, p, zone, strings.TrimSpace(body))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, u.bin, append([]string{"-t", "10"}, args...)...)
	cmd.Dir = wd
	cmd.Stdin = strings.NewReader(script)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s timed out:\n%s", u.name, out)
	}
	return string(out), err == nil
}

// TestUpdateNsupdate drives a three-member cluster with BIND's nsupdate.
func TestUpdateNsupdate(t *testing.T) { testUpdateClient(t, "nsupdate") }

// TestUpdateKnsupdate drives a three-member cluster with Knot's knsupdate.
func TestUpdateKnsupdate(t *testing.T) { testUpdateClient(t, "knsupdate") }

func testUpdateClient(t *testing.T, tool string) {
	harness.RequireTool(t, tool)
	c := harness.StartUpdateCluster(t)
	u := newUpdater(t, tool, c.WD)
	leader := c.Leader(t)
	follower := leader%3 + 1
	signed := []string{"-k", u.keyfile}

	// step sends body to member m with args and checks the outcome: ok, the
	// text the client printed (an rcode's name) when it failed, and that
	// the serial went up by bump (0 or 1) on member m and then everywhere.
	step := func(t *testing.T, m int, args []string, body string, ok bool, text []string, bump uint32) {
		t.Helper()
		before := c.Serial(t, m)
		out, succeeded := u.send(t, c.WD, c.Addr(m), "example.org.", args, body)
		if succeeded != ok {
			t.Fatalf("expected success %v from %s, got %v:\n%s", ok, u.name, succeeded, out)
		}
		if len(text) > 0 && !containsAny(out, text) {
			t.Fatalf("expected %s to print one of %q, got:\n%s", u.name, text, out)
		}
		if got := c.Serial(t, m); got != before+bump {
			t.Fatalf("expected serial %d after the update on member %d, got %d", before+bump, m, got)
		}
		c.Converged(t, before+bump)
	}

	t.Run("add", func(t *testing.T) {
		// Sent to a follower; three records in one message: one serial bump.
		step(t, follower, signed, `
update add multi.example.org. 60 A 198.51.100.1
update add multi.example.org. 60 A 198.51.100.2
update add multi.example.org. 60 TXT "one message"
`, true, nil, 1)
		// The member that answered NOERROR answers with the data at once.
		if got := harness.Rdata(t, c.Addr(follower), "multi.example.org", dns.TypeA); got != "198.51.100.1 198.51.100.2" {
			t.Fatalf("expected both A records on member %d once the update was answered, got %q", follower, got)
		}
		c.Everywhere(t, "multi.example.org", dns.TypeA, "198.51.100.1 198.51.100.2")
		c.Everywhere(t, "multi.example.org", dns.TypeTXT, `"one message"`)
	})

	t.Run("add over TCP", func(t *testing.T) {
		step(t, leader, append([]string{"-v"}, signed...), `update add tcp.example.org. 60 AAAA 2001:db8::53`, true, nil, 1)
		c.Everywhere(t, "tcp.example.org", dns.TypeAAAA, "2001:db8::53")
	})

	t.Run("no change", func(t *testing.T) {
		// Adding what is there and deleting what is not: NOERROR, no new serial.
		step(t, follower, signed, `
update add tcp.example.org. 60 AAAA 2001:db8::53
update delete nothing.example.org. A
update delete multi.example.org. A 198.51.100.77
`, true, nil, 0)
	})

	t.Run("re-adding a record is no change", func(t *testing.T) {
		step(t, follower, signed, `update add multi.example.org. 60 A 198.51.100.1`, true, nil, 0)
	})

	t.Run("ignored CNAME", func(t *testing.T) {
		// RFC 2136 §3.4.2.2: a CNAME beside other data is ignored.
		step(t, follower, signed, `update add www.example.org. 60 CNAME mail.example.org.`, true, nil, 0)
		c.Everywhere(t, "www.example.org", dns.TypeA, "192.0.2.10")
	})

	t.Run("delete one RR", func(t *testing.T) {
		step(t, follower, signed, `update delete multi.example.org. A 198.51.100.1`, true, nil, 1)
		c.Everywhere(t, "multi.example.org", dns.TypeA, "198.51.100.2")
	})

	t.Run("delete an RRset", func(t *testing.T) {
		step(t, leader, signed, `update delete multi.example.org. A`, true, nil, 1)
		c.Everywhere(t, "multi.example.org", dns.TypeA, "NODATA")
		c.Everywhere(t, "multi.example.org", dns.TypeTXT, `"one message"`)
	})

	t.Run("delete a name", func(t *testing.T) {
		step(t, follower, signed, `update delete multi.example.org.`, true, nil, 1)
		c.Everywhere(t, "multi.example.org", dns.TypeTXT, "NXDOMAIN")
	})

	t.Run("apex SOA and NS kept", func(t *testing.T) {
		// RFC 2136 §3.4.2.3-4: deleting every RRset at the apex spares the
		// SOA and NS; the MX, TXT and A go.
		step(t, follower, signed, `update delete example.org.`, true, nil, 1)
		c.Everywhere(t, "example.org", dns.TypeNS, "ns1.example.org. ns2.example.org.")
		c.Everywhere(t, "example.org", dns.TypeMX, "NODATA")
	})

	t.Run("prerequisites", func(t *testing.T) {
		add := "\nupdate add pre.example.org. 60 A 198.51.100.9"
		for _, tc := range []struct{ prereq, rcode string }{
			{"prereq nxdomain www.example.org.", "YXDOMAIN"},
			{"prereq yxdomain nothere.example.org.", "NXDOMAIN"},
			{"prereq nxrrset www.example.org. A", "YXRRSET"},
			{"prereq yxrrset www.example.org. MX", "NXRRSET"},
			{"prereq yxrrset www.example.org. A 192.0.2.99", "NXRRSET"},
			// Names that exist only below them (empty non-terminals) are not in use (RFC 2136 §2.4.4).
			{"prereq yxdomain devices.example.org.", "NXDOMAIN"},
		} {
			step(t, follower, signed, tc.prereq+add, false, []string{tc.rcode}, 0)
			c.Everywhere(t, "pre.example.org", dns.TypeA, "NXDOMAIN")
		}
		step(t, follower, signed, `
prereq nxdomain pre.example.org.
prereq yxdomain www.example.org.
prereq yxrrset www.example.org. A 192.0.2.10
prereq nxrrset www.example.org. MX
`+add, true, nil, 1)
		c.Everywhere(t, "pre.example.org", dns.TypeA, "198.51.100.9")
	})

	t.Run("SOA prerequisite and deletion", func(t *testing.T) {
		// "The zone exists" (RFC 2136 §2.4.1), and deleting the apex SOA,
		// which is ignored (§3.4.2.3).
		step(t, follower, signed, "prereq yxrrset example.org. SOA\nupdate add soa.example.org. 60 A 198.51.100.8", true, nil, 1)
		step(t, follower, signed, "update delete example.org. SOA", true, nil, 0)
	})

	t.Run("refused", func(t *testing.T) {
		add := `update add refused.example.org. 60 A 198.51.100.66`
		for _, tc := range []struct {
			what string
			args []string
			text []string
		}{
			{"unsigned", nil, []string{"REFUSED"}},
			{"wrong secret", []string{"-y", "hmac-sha256:" + updateKey + ":" + wrongSecret}, []string{"NOTAUTH", "BADSIG", "REFUSED"}},
			{"unknown key", []string{"-y", "hmac-sha256:nokey.:" + updateSecret}, []string{"NOTAUTH", "BADKEY", "REFUSED"}},
			{"key not allowed the name", []string{"-y", "hmac-sha256:" + acmeKey + ":" + acmeSecret}, []string{"REFUSED"}},
		} {
			t.Logf("%s", tc.what)
			step(t, follower, tc.args, add, false, tc.text, 0)
			step(t, leader, append([]string{"-v"}, tc.args...), add, false, tc.text, 0)
			c.Everywhere(t, "refused.example.org", dns.TypeA, "NXDOMAIN")
		}
		// The narrow key may write what its rule names.
		step(t, follower, []string{"-y", "hmac-sha256:" + acmeKey + ":" + acmeSecret},
			`update add _acme-challenge.example.org. 60 TXT "token"`, true, nil, 1)
	})

	t.Run("not authoritative", func(t *testing.T) {
		before := c.Serial(t, follower)
		// In the server block's zone but no stored zone: NOTAUTH (RFC 2136 §3.1.1).
		out, ok := u.send(t, c.WD, c.Addr(follower), "sub.example.org.", signed, `update add x.sub.example.org. 60 A 198.51.100.5`)
		if ok || !strings.Contains(out, "NOTAUTH") {
			t.Fatalf("expected NOTAUTH for a zone the member does not have, got:\n%s", out)
		}
		// In no server block: CoreDNS itself refuses before any plugin runs.
		out, ok = u.send(t, c.WD, c.Addr(follower), "example.com.", signed, `update add x.example.com. 60 A 198.51.100.5`)
		if ok || !containsAny(out, []string{"NOTAUTH", "REFUSED"}) {
			t.Fatalf("expected NOTAUTH or REFUSED for a zone the server has no block for, got:\n%s", out)
		}
		if got := c.Serial(t, follower); got != before {
			t.Fatalf("expected serial %d to stay, got %d", before, got)
		}
		c.Everywhere(t, "x.sub.example.org", dns.TypeA, "NXDOMAIN")
	})
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// newUpdate returns an UPDATE for example.org.
func newUpdate() *dns.Msg {
	m := new(dns.Msg)
	m.SetUpdate("example.org.")
	return m
}

// exchangeUpdate signs m with the example key and sends it.
func exchangeUpdate(m *dns.Msg, net, addr string) (*dns.Msg, error) {
	m.SetTsig(updateKey, dns.HmacSHA256, 300, time.Now().Unix())
	c := &dns.Client{Net: net, Timeout: 10 * time.Second, TsigSecret: map[string]string{updateKey: updateSecret}}
	r, _, err := c.Exchange(m, addr)
	return r, err
}

func mustRR(t *testing.T, s string) dns.RR {
	t.Helper()
	rr, err := dns.NewRR(s)
	if err != nil {
		t.Fatal(err)
	}
	return rr
}

// TestUpdateRace sends conflicting updates to all three members at once,
// each guarded by the same prerequisite: prerequisites are evaluated when
// the entry is applied, so exactly one wins, once, on every member.
func TestUpdateRace(t *testing.T) {
	c := harness.StartUpdateCluster(t)
	before := c.Serial(t, 1)
	const n = 30
	rcodes := make([]int, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := newUpdate()
			m.NameNotUsed([]dns.RR{&dns.ANY{Hdr: dns.RR_Header{Name: "lock.example.org.", Rrtype: dns.TypeANY, Class: dns.ClassINET}}})
			m.Insert([]dns.RR{mustRR(t, fmt.Sprintf(`lock.example.org. 60 TXT "owner %d"`, i))})
			r, err := exchangeUpdate(m, "udp", c.Addr(i%3+1))
			if err != nil {
				t.Errorf("update %d: %v", i, err)
				return
			}
			rcodes[i] = r.Rcode
		}()
	}
	wg.Wait()
	winner := -1
	for i, rc := range rcodes {
		switch rc {
		case dns.RcodeSuccess:
			if winner >= 0 {
				t.Fatalf("expected one update to succeed, got %d and %d", winner, i)
			}
			winner = i
		case dns.RcodeYXDomain:
		default:
			t.Fatalf("expected NOERROR or YXDOMAIN, got %s for update %d", dns.RcodeToString[rc], i)
		}
	}
	if winner < 0 {
		t.Fatal("expected one update to succeed, got none")
	}
	c.Converged(t, before+1)
	c.Everywhere(t, "lock.example.org", dns.TypeTXT, fmt.Sprintf(`"owner %d"`, winner))
}

// TestUpdateLimits checks the refusals that do not depend on the zone's
// state: too many records (max_update_records, default 1024), a record
// outside the zone (NOTZONE), a DNSSEC type (NOTIMP), RDATA the store
// cannot write (FORMERR; found by FuzzUpdate: every member failed to apply
// such an entry, and the group stopped); nothing is written, and the group
// takes the next update.
func TestUpdateLimits(t *testing.T) {
	c := harness.StartUpdateCluster(t)
	before := c.Serial(t, 2)

	big := newUpdate()
	big.SetEdns0(4096, false)
	for i := 0; i < 1025; i++ {
		big.Insert([]dns.RR{mustRR(t, fmt.Sprintf("big%d.example.org. 60 A 198.51.100.1", i))})
	}
	r, err := exchangeUpdate(big, "tcp", c.Addr(2))
	if err != nil {
		t.Fatalf("big update over TCP: %v", err)
	}
	if r.Rcode != dns.RcodeRefused {
		t.Errorf("expected REFUSED for 1025 records, got %s", dns.RcodeToString[r.Rcode])
	}
	if ede := extendedError(r); !strings.Contains(ede, "at most 1024") {
		t.Errorf("expected an Extended DNS Error naming the limit, got %q", ede)
	}

	outside := newUpdate()
	outside.Insert([]dns.RR{mustRR(t, "x.example.net. 60 A 198.51.100.1")})
	if r, err := exchangeUpdate(outside, "udp", c.Addr(2)); err != nil || r.Rcode != dns.RcodeNotZone {
		t.Errorf("expected NOTZONE for a record outside the zone, got %v %v", r, err)
	}

	dnssec := newUpdate()
	dnssec.Insert([]dns.RR{mustRR(t, "x.example.org. 60 DS 12345 13 2 "+strings.Repeat("ab", 32))})
	if r, err := exchangeUpdate(dnssec, "udp", c.Addr(2)); err != nil || r.Rcode != dns.RcodeNotImplemented {
		t.Errorf("expected NOTIMP for a DS record, got %v %v", r, err)
	}

	// A NINFO record with no RDATA: miekg/dns unpacks it and cannot pack it.
	empty := newUpdate()
	empty.Insert([]dns.RR{&dns.RFC3597{Hdr: dns.RR_Header{Name: "x.example.org.", Rrtype: dns.TypeNINFO, Class: dns.ClassINET, Ttl: 60}}})
	if r, err := exchangeUpdate(empty, "udp", c.Addr(2)); err != nil || r.Rcode != dns.RcodeFormatError {
		t.Errorf("expected FORMERR for a record with RDATA that cannot be stored, got %v %v", r, err)
	}

	if got := c.Serial(t, 2); got != before {
		t.Errorf("expected serial %d to stay, got %d", before, got)
	}
	c.Everywhere(t, "big0.example.org", dns.TypeA, "NXDOMAIN")
	next := newUpdate()
	next.Insert([]dns.RR{mustRR(t, "after.example.org. 60 A 198.51.100.7")})
	if r, err := exchangeUpdate(next, "udp", c.Addr(1)); err != nil || r.Rcode != dns.RcodeSuccess {
		t.Fatalf("expected the next update to succeed, got %v %v", r, err)
	}
	c.Converged(t, before+1)
	c.Everywhere(t, "after.example.org", dns.TypeA, "198.51.100.7")
}

func extendedError(r *dns.Msg) string {
	if e := ede.Of(r); e != nil {
		return e.ExtraText
	}
	return ""
}

// TestUpdateRefusalAnsweredOnce sends refused UPDATEs over UDP and counts
// the datagrams that come back: a DNS server answers a request once.
func TestUpdateRefusalAnsweredOnce(t *testing.T) {
	c := harness.StartUpdateCluster(t)
	for _, rr := range []string{
		"x.example.org. 60 DS 12345 13 2 " + strings.Repeat("ab", 32), // NOTIMP
		"x.example.net. 60 A 198.51.100.1",                            // NOTZONE: answered once today
	} {
		m := newUpdate()
		m.Insert([]dns.RR{mustRR(t, rr)})
		m.SetTsig(updateKey, dns.HmacSHA256, 300, time.Now().Unix())
		buf, _, err := dns.TsigGenerate(m, updateSecret, "", false)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := net.Dial("udp", c.Addr(1))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write(buf); err != nil {
			t.Fatal(err)
		}
		answers := 0
		for {
			conn.SetReadDeadline(time.Now().Add(time.Second))
			b := make([]byte, 4096)
			if _, err := conn.Read(b); err != nil {
				break
			}
			answers++
		}
		conn.Close()
		if answers != 1 {
			t.Errorf("expected one answer to the update adding %q, got %d", rr, answers)
		}
	}
}

// TestUpdateNoQuorum sends an UPDATE to the one member left running: it
// cannot commit, so it answers SERVFAIL after its write timeout (5s) and
// never NOERROR.
func TestUpdateNoQuorum(t *testing.T) {
	c := harness.StartUpdateCluster(t)
	c.Procs[1].Kill()
	c.Procs[2].Kill()
	m := newUpdate()
	m.Insert([]dns.RR{mustRR(t, "lonely.example.org. 60 A 198.51.100.44")})
	r, err := exchangeUpdate(m, "tcp", c.Addr(1))
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	if r.Rcode != dns.RcodeServerFailure {
		t.Fatalf("expected SERVFAIL without a quorum, got %s", dns.RcodeToString[r.Rcode])
	}
}
