package dnsdiff

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// knotConf is a Knot DNS configuration: a secondary for origin of primary
// (host, port) on 127.0.0.1:port, taking NOTIFY from 127.0.0.1 and
// serving transfers to it (to compare its copy of the zone), keeping
// nothing but its journal and timers in dir, logging at info level to
// dir/knot.log.
func knotConf(dir string, port int, origin, host, pport string) string {
	return fmt.Sprintf(`server:
    listen: 127.0.0.1@%d
    rundir: "%[2]s"
    pidfile: "%[2]s/knot.pid"

control:
    listen: "%[2]s/knot.sock"

database:
    storage: "%[2]s"

log:
  - target: "%[2]s/knot.log"
    any: info

remote:
  - id: primary
    address: %[4]s@%[5]s

acl:
  - id: notify_from_primary
    address: 127.0.0.1
    action: notify
  - id: transfer_to_loopback
    address: 127.0.0.1
    action: transfer

zone:
  - domain: %[3]s
    storage: "%[2]s"
    file: "%[3]szone"
    master: primary
    acl: [notify_from_primary, transfer_to_loopback]
    zonefile-sync: -1
    zonefile-load: none
    journal-content: changes
`, port, dir, origin, host, pport)
}

// StartKnotSecondary starts Knot DNS on 127.0.0.1:port as a secondary for
// origin of primary (host:port) and waits until it serves the zone: it has
// transferred it. Knot stops on t.Cleanup. It is missing: the test fails
// in CI (CI=true) and is skipped elsewhere.
func StartKnotSecondary(t testing.TB, origin, primary string, port int) *Secondary {
	t.Helper()
	bin := requireServer(t, "knotd")
	host, pport, err := net.SplitHostPort(primary)
	if err != nil {
		t.Fatal(err)
	}
	s := &Secondary{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: t.TempDir()}
	s.log = filepath.Join(s.dir, "knot.log")
	conf := filepath.Join(s.dir, "knot.conf")
	if err := os.WriteFile(conf, []byte(knotConf(s.dir, port, dns.Fqdn(origin), host, pport)), 0o644); err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	exited, stop, err := startServer(out, bin, "-c", conf) // knotd runs in the foreground
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	s.waitTransferred(t, "knotd", origin, primary, exited, out)
	return s
}

// StartKnotOnlineSign starts Knot DNS on 127.0.0.1:port serving origin
// from zoneText, signed online by its mod-onlinesign module (ECDSA P-256,
// one key, made on start), and waits until it answers. Knot stops on
// t.Cleanup. It is missing: the test fails in CI (CI=true) and is skipped
// elsewhere.
func StartKnotOnlineSign(t testing.TB, origin, zoneText string, port int) string {
	t.Helper()
	bin := requireServer(t, "knotd")
	dir := t.TempDir()
	origin = dns.Fqdn(origin)
	if err := os.WriteFile(filepath.Join(dir, "zone"), []byte(zoneText), 0o644); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "db"), 0o755)
	conf := fmt.Sprintf(`server:
    listen: 127.0.0.1@%d
    rundir: "%[2]s"
    pidfile: "%[2]s/knot.pid"
control:
    listen: "%[2]s/knot.sock"
database:
    storage: "%[2]s/db"
log:
  - target: "%[2]s/knot.log"
    any: info
policy:
  - id: online
    algorithm: ecdsap256sha256
    single-type-signing: on
mod-onlinesign:
  - id: online
    policy: online
zone:
  - domain: %[3]s
    storage: "%[2]s"
    file: "%[2]s/zone"
    zonefile-sync: -1
    journal-content: none
    module: mod-onlinesign/online
`, port, dir, origin)
	path := filepath.Join(dir, "knot.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	exited, stop, err := startServer(out, bin, "-c", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "knot.log"))
			t.Fatalf("knotd exited:\n%s\n%s", out.String(), log)
		default:
		}
		if m := querySOA(addr, origin); m != nil && m.Rcode == dns.RcodeSuccess && len(m.Answer) > 0 {
			return addr
		}
	}
	log, _ := os.ReadFile(filepath.Join(dir, "knot.log"))
	t.Fatalf("knotd does not serve %s:\n%s", origin, log)
	return ""
}
