package dnsdiff

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
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

// knotBinary finds knotd, in $PATH or in /usr/sbin.
func knotBinary() string {
	if p, err := exec.LookPath("knotd"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/knotd", "/usr/local/sbin/knotd"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// StartKnotSecondary starts Knot DNS on 127.0.0.1:port as a secondary for
// origin of primary (host:port) and waits until it serves the zone: it has
// transferred it. Knot stops on t.Cleanup. It is missing: the test fails
// in CI (CI=true) and is skipped elsewhere.
func StartKnotSecondary(t testing.TB, origin, primary string, port int) *Secondary {
	t.Helper()
	bin := knotBinary()
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("knotd is not installed")
		}
		t.Skip("knotd is not installed")
	}
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
	cmd := exec.Command(bin, "-c", conf)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	})
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		select {
		case <-exited:
			t.Fatalf("knotd exited:\n%s\n%s", out.String(), s.Log())
		default:
		}
		if r := querySOA(s.Addr, dns.Fqdn(origin)); r != nil && r.Rcode == dns.RcodeSuccess && len(r.Answer) > 0 {
			return s
		}
	}
	t.Fatalf("knotd did not transfer %s from %s:\n%s\n%s", origin, primary, out.String(), s.Log())
	return nil
}
