// Package harness starts the coredns binary of this repository from
// Corefiles and talks to it with real clients on loopback. The integration
// tests use it, and so do test modules nested in this repository (for
// example integration/acme, which keeps lego out of the product's go.mod).
package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

var (
	// Binary is the coredns binary under test, set by Main.
	Binary string
	// Repo is the repository root (the directory that holds plugin.cfg), set by Main.
	Repo string
)

// Main is the TestMain of an integration package: it finds the repository
// root, takes the binary from COREDNS_BINARY (make test builds ./coredns
// once and passes it in) or builds it once, runs the tests and exits.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for Repo = wd; ; Repo = filepath.Dir(Repo) {
		if _, err := os.Stat(filepath.Join(Repo, "plugin.cfg")); err == nil {
			break
		}
		if Repo == filepath.Dir(Repo) {
			fmt.Fprintln(os.Stderr, "no plugin.cfg above", wd)
			return 1
		}
	}
	if Binary = os.Getenv("COREDNS_BINARY"); Binary != "" {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "craftdns-integration")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	Binary = filepath.Join(dir, "coredns")
	build := exec.Command("go", "build", "-o", Binary, "./cmd/coredns")
	build.Dir = Repo
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building coredns:", err)
		return 1
	}
	return m.Run()
}

// RequireDocker returns the docker command when an engine answers; without
// one the test fails under CI=true and is skipped elsewhere.
func RequireDocker(t testing.TB) string {
	t.Helper()
	docker := RequireTool(t, "docker")
	if out, err := exec.Command(docker, "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no Docker engine answers (.ci/run starts one): %v: %s", err, out)
		}
		t.Skipf("no Docker engine: %v", err)
	}
	return docker
}

// RequireTool fails in CI (CI=true) and skips elsewhere when a tool is missing.
func RequireTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is required (apt-get install it; .ci/run does)", name)
		}
		t.Skipf("%s not installed", name)
	}
	return p
}

// Workdir makes a working directory in which the examples' relative paths
// (Corefile.examples/..., data/...) resolve: data stays in the test's
// temporary directory.
func Workdir(t testing.TB) string {
	t.Helper()
	wd := t.TempDir()
	if err := os.Symlink(filepath.Join(Repo, "Corefile.examples"), filepath.Join(wd, "Corefile.examples")); err != nil {
		t.Fatal(err)
	}
	return wd
}

// Proc is one coredns process.
type Proc struct {
	t        testing.TB
	Name     string
	dir      string
	corefile string
	env      []string
	cmd      *exec.Cmd
	done     chan struct{}
}

// Start runs coredns -conf corefile in dir; the process is killed when the
// test ends. Its output goes to dir/name.log.
func Start(t testing.TB, name, dir, corefile string) *Proc {
	t.Helper()
	return StartEnv(t, name, dir, corefile)
}

// StartEnv is Start with env (KEY=VALUE) added to the process's
// environment: the Corefile's {$KEY} placeholders.
func StartEnv(t testing.TB, name, dir, corefile string, env ...string) *Proc {
	t.Helper()
	p := &Proc{t: t, Name: name, dir: dir, corefile: corefile, env: env}
	p.run()
	t.Cleanup(func() { p.Kill() })
	return p
}

func (p *Proc) run() {
	p.t.Helper()
	logf, err := os.OpenFile(filepath.Join(p.dir, p.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	p.cmd = exec.Command(Binary, "-conf", p.corefile)
	p.cmd.Dir = p.dir
	if len(p.env) > 0 {
		p.cmd.Env = append(os.Environ(), p.env...)
	}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func() { p.cmd.Wait(); logf.Close(); close(p.done) }()
}

// Kill sends SIGKILL and waits for the process to go.
func (p *Proc) Kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Signal sends sig to the process (SIGUSR1 reloads the Corefile).
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Wait waits up to d for the process to exit and returns its exit code
// (-1 when a signal killed it), or an error when it is still running.
func (p *Proc) Wait(d time.Duration) (int, error) {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), nil
	case <-time.After(d):
		return 0, fmt.Errorf("%s still runs after %v", p.Name, d)
	}
}

// RSS returns the resident memory of the process in bytes (VmRSS).
func (p *Proc) RSS(t testing.TB) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS for %s", p.Name)
	return 0
}

// Restart starts the process again with the same Corefile and directory.
func (p *Proc) Restart() { p.run() }

// Logs returns what the process printed.
func (p *Proc) Logs() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, p.Name+".log"))
	return string(b)
}

// WaitReady polls the ready plugin's endpoint for up to a minute and fails
// the test, with the logs of procs, when it never answers 200.
func WaitReady(t testing.TB, url string, procs ...*Proc) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, p := range procs {
		t.Logf("%s log:\n%s", p.Name, p.Logs())
	}
	t.Fatalf("%s never became ready", url)
}

// API is a small client of the craftstore and craftroute HTTP API.
type API struct {
	Base  string // http://host:port
	Token string // bearer token, if any
}

// Do sends body (nil, a string sent as is, or a value sent as JSON) and
// decodes the reply into out (a *string takes it as text). A string body
// of a PUT goes as a zone file (text/dns), any other body as JSON.
func (a API) Do(method, path string, body any, out any) (int, error) {
	var rd io.Reader
	ctype := "application/json"
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
		if method == http.MethodPut {
			ctype = "text/dns"
		}
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(j)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, a.Base+path, rd)
	if err != nil {
		return 0, err
	}
	if a.Token != "" {
		req.Header.Set("Authorization", "Bearer "+a.Token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if out != nil {
		if s, ok := out.(*string); ok {
			*s = string(data)
		} else if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("decoding %q: %w", data, err)
		}
	}
	return resp.StatusCode, nil
}

// Query sends one question over UDP (EDNS0, no recursion) and returns the reply.
func Query(addr, name string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.RecursionDesired = false
	m.SetEdns0(4096, false)
	c := &dns.Client{Timeout: 2 * time.Second}
	r, _, err := c.Exchange(m, addr)
	return r, err
}

// HasA reports whether addr answers name/A with ip.
func HasA(addr, name, ip string) bool {
	r, err := Query(addr, name, dns.TypeA)
	if err != nil || r.Rcode != dns.RcodeSuccess {
		return false
	}
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok && a.A.String() == ip {
			return true
		}
	}
	return false
}

// ListenPort returns a loopback port, free for TCP and UDP a moment ago,
// below the kernel's ephemeral range (32768 and up on Linux), so that the
// UDP client sockets of the routers and the tests do not take it before
// the server does, and not handed out before in this process.
func ListenPort(t testing.TB) int {
	t.Helper()
	portMu.Lock()
	defer portMu.Unlock()
	for try := 0; try < 1000; try++ {
		p := 20000 + rand.IntN(12000)
		if portsUsed[p] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		pc, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p))
		ln.Close()
		if err != nil {
			continue
		}
		pc.Close()
		portsUsed[p] = true
		return p
	}
	t.Fatal("no free port found")
	return 0
}

var (
	portMu    sync.Mutex
	portsUsed = map[int]bool{}
)

// Eventually polls cond every 50ms for up to d and fails the test if it never holds.
func Eventually(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out after %v waiting for %s", d, what)
}
