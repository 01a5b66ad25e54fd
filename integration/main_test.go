// Package integration starts the real coredns binary (built once in
// TestMain) from Corefiles and talks to it with real clients on loopback.
package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// binary is the coredns binary under test.
var binary string

// repo is the repository root.
var repo string

func TestMain(m *testing.M) {
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	repo = filepath.Dir(wd)
	dir, err := os.MkdirTemp("", "craftdns-integration")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// make test builds ./coredns first and passes it in; a plain go test
	// builds it here.
	if binary = os.Getenv("COREDNS_BINARY"); binary != "" {
		os.Exit(m.Run())
	}
	binary = filepath.Join(dir, "coredns")
	build := exec.Command("go", "build", "-o", binary, "./cmd/coredns")
	build.Dir = repo
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building coredns:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// requireTool fails in CI (CI=true) and skips elsewhere when a tool is missing.
func requireTool(t testing.TB, name string) string {
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

// workdir makes a working directory in which the examples' relative paths
// (Corefile.examples/..., data/...) resolve: data stays in the test's
// temporary directory.
func workdir(t testing.TB) string {
	t.Helper()
	wd := t.TempDir()
	if err := os.Symlink(filepath.Join(repo, "Corefile.examples"), filepath.Join(wd, "Corefile.examples")); err != nil {
		t.Fatal(err)
	}
	return wd
}

// proc is one coredns process.
type proc struct {
	t       testing.TB
	name    string
	dir     string
	corefil string
	cmd     *exec.Cmd
	done    chan struct{}
}

// start runs coredns -conf corefile in dir.
func start(t testing.TB, name, dir, corefile string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, dir: dir, corefil: corefile}
	p.run()
	t.Cleanup(func() { p.kill() })
	return p
}

func (p *proc) run() {
	p.t.Helper()
	logf, err := os.OpenFile(filepath.Join(p.dir, p.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	p.cmd = exec.Command(binary, "-conf", p.corefil)
	p.cmd.Dir = p.dir
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func() { p.cmd.Wait(); logf.Close(); close(p.done) }()
}

// kill sends SIGKILL and waits for the process to go.
func (p *proc) kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// restart starts the process again with the same Corefile and directory.
func (p *proc) restart() { p.run() }

// logs returns what the process printed.
func (p *proc) logs() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, p.name+".log"))
	return string(b)
}

// waitReady polls the ready plugin's endpoint.
func waitReady(t testing.TB, url string, procs ...*proc) {
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
		t.Logf("%s log:\n%s", p.name, p.logs())
	}
	t.Fatalf("%s never became ready", url)
}

// api is a small client of the craftstore HTTP API.
type api struct {
	base  string
	token string
}

func (a api) do(method, path string, body any, out any) (int, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(j)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return 0, err
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
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

// query sends one question over UDP and returns the reply.
func query(addr, name string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.RecursionDesired = false
	m.SetEdns0(4096, false)
	c := &dns.Client{Timeout: 2 * time.Second}
	r, _, err := c.Exchange(m, addr)
	return r, err
}

// hasA reports whether addr answers name/A with ip.
func hasA(addr, name, ip string) bool {
	r, err := query(addr, name, dns.TypeA)
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

// freePort returns a loopback port that was free for TCP and UDP a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	return listenPort(t) // free for TCP and UDP, outside the ephemeral range
}

func eventually(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out after %v waiting for %s", d, what)
}
