package dnsdiff

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// FreePort returns a port that is free for both UDP and TCP on 127.0.0.1.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// Secondary is an NSD or Knot secondary started by StartNSDSecondary or
// StartKnotSecondary.
type Secondary struct {
	Addr string // host:port, UDP and TCP
	dir  string
	log  string // its log file
}

// Log returns what the secondary logged so far.
func (s *Secondary) Log() string {
	b, _ := os.ReadFile(s.log)
	return string(b)
}

// StartNSDSecondary starts NSD on 127.0.0.1:port as a secondary for origin
// of primary (host:port), and waits until it serves the zone: it has
// transferred it. NSD runs as in StartNSD and stops on t.Cleanup. The port
// comes from the caller (FreePort): the primary must know it to send NOTIFY.
func StartNSDSecondary(t testing.TB, origin, primary string, port int) *Secondary {
	t.Helper()
	bin := requireNSD(t)
	host, pport, err := net.SplitHostPort(primary)
	if err != nil {
		t.Fatal(err)
	}
	s := &Secondary{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: t.TempDir()}
	s.log = filepath.Join(s.dir, "nsd.log")
	conf := filepath.Join(s.dir, "nsd.conf")
	// A secondary of one primary: it transfers the zone from it (IXFR,
	// falling back to AXFR) and takes NOTIFY from 127.0.0.1; it logs
	// transfers and NOTIFYs (verbosity 2) to a file.
	text := nsdConf(s.dir, port, origin,
		fmt.Sprintf("\tlogfile: \"%s/nsd.log\"\n\tverbosity: 2", s.dir),
		fmt.Sprintf("\trequest-xfr: %s@%s NOKEY\n\tallow-notify: 127.0.0.1 NOKEY", host, pport))
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	// Unlike runNSD, SERVFAIL is expected until the first transfer is done.
	exited, stop, err := startNSD(bin, conf, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	s.waitTransferred(t, "nsd", origin, primary, exited, nil)
	return s
}

// waitTransferred waits up to 30s until the secondary serves origin (it
// has transferred it from primary), and fails t if it does not or its
// process (exited) ends; out, when not nil, is the process's output.
func (s *Secondary) waitTransferred(t testing.TB, name, origin, primary string, exited <-chan struct{}, out *syncBuffer) {
	t.Helper()
	output := func() string {
		if out == nil {
			return s.Log()
		}
		return out.String() + "\n" + s.Log()
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		select {
		case <-exited:
			t.Fatalf("%s exited:\n%s", name, output())
		default:
		}
		if r := querySOA(s.Addr, dns.Fqdn(origin)); r != nil && r.Rcode == dns.RcodeSuccess && len(r.Answer) > 0 {
			return
		}
	}
	t.Fatalf("%s did not transfer %s from %s:\n%s", name, origin, primary, output())
}
