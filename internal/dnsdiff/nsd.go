package dnsdiff

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// nsdConf is NSD's configuration: one zone, one server process on
// 127.0.0.1, no chroot, no privilege drop, no rate limiting, everything in
// dir. server and zone are extra lines for the server and zone clauses.
func nsdConf(dir string, port int, origin, server, zone string) string {
	return fmt.Sprintf(`server:
	ip-address: 127.0.0.1@%[2]d
	server-count: 1
	username: ""
	chroot: ""
	database: ""
	zonesdir: "%[1]s"
	zonelistfile: "%[1]s/zone.list"
	xfrdfile: "%[1]s/xfrd.state"
	xfrdir: "%[1]s"
	pidfile: "%[1]s/nsd.pid"
	hide-version: yes
	rrl-ratelimit: 0
	rrl-whitelist-ratelimit: 0
%[4]s
remote-control:
	control-enable: no

zone:
	name: "%[3]s"
	zonefile: "%[1]s/zone"
%[5]s
`, dir, port, dns.Fqdn(origin), server, zone)
}

// requireNSD returns the nsd binary; without one it fails the test in CI
// (CI=true) and skips it elsewhere.
func requireNSD(t testing.TB) string {
	t.Helper()
	return requireServer(t, "nsd")
}

// requireServer returns the path of the server binary name (sbinary); it
// fails the test in CI (CI=true) when it is missing, and skips it elsewhere.
// RequireTool returns the path of tool name (in $PATH or /usr/sbin), for
// tests outside integration/ (which have harness.RequireTool): missing, it
// fails t under CI=true and skips it elsewhere.
func RequireTool(t testing.TB, name string) string {
	t.Helper()
	return requireServer(t, name)
}

func requireServer(t testing.TB, name string) string {
	t.Helper()
	bin := sbinary(name)
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not installed", name)
		}
		t.Skipf("%s is not installed", name)
	}
	return bin
}

// nsdBinary finds nsd, in $PATH or in /usr/sbin (not in every user's $PATH).
func nsdBinary() string { return sbinary("nsd") }

// sbinary finds the server binary name in $PATH, /usr/sbin or
// /usr/local/sbin; "" when it is in none.
func sbinary(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/usr/local/sbin"} {
		if p := filepath.Join(dir, name); fileExists(p) {
			return p
		}
	}
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// StartNSD starts NSD serving zoneText as origin on 127.0.0.1 and returns
// its address (host:port, UDP and TCP). NSD runs in the foreground (nsd -d)
// with its configuration and files in t.TempDir() and stops on t.Cleanup.
// Each option is a line of NSD's server clause, e.g. "minimal-responses:
// yes"; none are needed for NSD's defaults. Without nsd installed the test
// is skipped, or fails when the environment variable CI is "true".
func StartNSD(t testing.TB, origin, zoneText string, options ...string) (addr string) {
	t.Helper()
	bin := requireNSD(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "zone"), []byte(zoneText), 0o644); err != nil {
		t.Fatal(err)
	}
	var opts bytes.Buffer
	for _, o := range options {
		fmt.Fprintf(&opts, "\t%s\n", o)
	}

	// The port is free when we look; another process may take it before
	// NSD binds it, so try a few.
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		conf := filepath.Join(dir, "nsd.conf")
		text := nsdConf(dir, port, origin, "\tverbosity: 1\n"+opts.String(), "")
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		err = runNSD(t, bin, conf, addr, dns.Fqdn(origin))
		if err == nil {
			return addr
		}
		if !errors.Is(err, errExited) || attempt == 4 {
			t.Fatalf("starting nsd: %v", err)
		}
	}
}

var errExited = errors.New("nsd exited")

// startNSD starts nsd -d -c conf (in the foreground), its output to out:
// startServer.
func startNSD(bin, conf string, out io.Writer) (exited <-chan struct{}, stop func(), err error) {
	return startServer(out, bin, "-d", "-c", conf)
}

// startServer starts bin with args, its output to out, in a process group
// of its own: a server may fork (NSD forks a server and an xfrd process),
// and if the main process dies uncleanly its children must not outlive the
// test. exited closes when it ends; stop asks it to end (SIGTERM) and kills
// the group after 5s.
func startServer(out io.Writer, bin string, args ...string) (exited <-chan struct{}, stop func(), err error) {
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	return done, func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}, nil
}

// runNSD starts nsd -d with conf and waits until it answers the SOA query
// for origin at addr. On success the process is stopped on t.Cleanup. The
// error is errExited if NSD ended by itself (it could not bind the port, or
// the configuration is wrong).
func runNSD(t testing.TB, bin, conf, addr, origin string) error {
	out := &syncBuffer{}
	exited, stop, err := startNSD(bin, conf, out)
	if err != nil {
		return err
	}

	var answered time.Time // when NSD first answered, but not with the SOA
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case <-exited:
			return fmt.Errorf("%w: %s", errExited, out.String())
		default:
		}
		r := querySOA(addr, origin)
		switch {
		case r != nil && r.Rcode == dns.RcodeSuccess && len(r.Answer) > 0:
			t.Cleanup(stop)
			return nil
		case r != nil && answered.IsZero():
			answered = time.Now()
		case r != nil && time.Since(answered) > time.Second:
			stop()
			return fmt.Errorf("nsd answers %s to the SOA query of %s (a broken zone?): %s", dns.RcodeToString[r.Rcode], origin, out.String())
		}
	}
	stop()
	return fmt.Errorf("nsd did not answer the SOA of %s at %s: %s", origin, addr, out.String())
}

// querySOA asks addr for the SOA of origin; nil if there is no answer.
func querySOA(addr, origin string) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(origin, dns.TypeSOA)
	c := &dns.Client{Timeout: 200 * time.Millisecond}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		return nil
	}
	return r
}

// freePort returns a port that is free for both UDP and TCP on 127.0.0.1.
func freePort() (int, error) {
	for i := 0; i < 20; i++ {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := pc.LocalAddr().(*net.UDPAddr).Port
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		pc.Close()
		if err != nil {
			continue
		}
		l.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free port on 127.0.0.1")
}

// syncBuffer collects NSD's output from the goroutines of exec.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// StartNSDPrimary starts NSD serving zoneText as origin on 127.0.0.1:port,
// giving AXFR to any client on loopback (a primary to import from), and
// returns its address. It stops on t.Cleanup. Without nsd installed the
// test is skipped, or fails when CI is "true".
func StartNSDPrimary(t testing.TB, origin, zoneText string, port int) (addr string) {
	t.Helper()
	bin := requireNSD(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "zone"), []byte(zoneText), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "nsd.conf")
	text := nsdConf(dir, port, origin, "\tverbosity: 1\n", "\tprovide-xfr: 127.0.0.1 NOKEY\n")
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if err := runNSD(t, bin, conf, addr, dns.Fqdn(origin)); err != nil {
		t.Fatalf("starting nsd as a primary on %s: %v", addr, err)
	}
	return addr
}
