package integration

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"

	"github.com/miekg/dns"
)

// composeProject is one deploy/compose file brought up under a project
// name of the test's own, with the image the test built.
type composeProject struct {
	t       *testing.T
	file    string
	project string
	image   string
}

func (c *composeProject) cmd(args ...string) *exec.Cmd {
	cmd := exec.Command(harness.RequireTool(c.t, "docker-compose"), append([]string{"-f", c.file, "-p", c.project}, args...)...)
	cmd.Env = append(append(os.Environ(), "CRAFTDNS_IMAGE="+c.image), composeSecrets...)
	return cmd
}

func (c *composeProject) run(args ...string) string {
	c.t.Helper()
	out, err := c.cmd(args...).CombinedOutput()
	if err != nil {
		c.t.Fatalf("docker-compose %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (c *composeProject) logs() string {
	out, _ := c.cmd("logs", "--no-color", "--tail", "40").CombinedOutput()
	return string(out)
}

// up starts the project, removes it (volumes included) when the test ends,
// and returns how long it took until every ready URL answered 200.
func (c *composeProject) up(ready ...string) time.Duration {
	c.t.Helper()
	c.t.Cleanup(func() {
		if c.t.Failed() {
			c.t.Logf("compose logs:\n%s", c.logs())
		}
		c.cmd("down", "-v", "--timeout", "20").Run()
	})
	start := time.Now()
	c.run("up", "-d")
	deadline := start.Add(120 * time.Second)
	for _, url := range ready {
		for {
			resp, err := http.Get(url)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("%s never became ready", url)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return time.Since(start)
}

// buildComposeImage builds the image with make image under a tag of the
// test's own.
func buildComposeImage(t *testing.T) string {
	t.Helper()
	docker := harness.RequireDocker(t)
	harness.RequireTool(t, "docker-compose")
	image := fmt.Sprintf("craftdns:compose-%d", os.Getpid())
	run(t, "make", "-C", harness.Repo, "--no-print-directory", "image", "IMAGE="+image)
	t.Cleanup(func() { exec.Command(docker, "rmi", "-f", image).Run() })
	return image
}

// composeSecrets is the environment the compose files need: the API token
// and the router key, which have no defaults.
var composeSecrets = []string{"CRAFTDNS_API_TOKEN=compose-test-token", "CRAFTDNS_ROUTER_KEY=compose-test-router-key-0123456789"}

// TestComposeConfig: docker-compose reads both compose files without a
// complaint, refuses one with a field it does not know, naming it, and
// refuses to start without the secrets, naming them (there is no example
// token to fall back to).
func TestComposeConfig(t *testing.T) {
	bin := harness.RequireTool(t, "docker-compose")
	compose := func(env []string, args ...string) ([]byte, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), env...)
		return cmd.CombinedOutput()
	}
	for _, f := range []string{"shard.yml", "sharded.yml"} {
		path := filepath.Join(harness.Repo, "deploy/compose", f)
		if out, err := compose(composeSecrets, "-f", path, "config", "-q"); err != nil {
			t.Errorf("%s: %v\n%s", f, err, out)
		}
		var unset []string
		for _, v := range composeSecrets {
			name, _, _ := strings.Cut(v, "=")
			unset = append(unset, name+"=")
		}
		if out, err := compose(unset, "-f", path, "config", "-q"); err == nil || !strings.Contains(string(out), "CRAFTDNS_API_TOKEN") {
			t.Errorf("%s without CRAFTDNS_API_TOKEN: expected an error naming it, got %v:\n%s", f, err, out)
		}
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		bad := strings.Replace(string(text), "    <<: *member\n", "    <<: *member\n    restart_policy_typo: always\n", 1)
		badPath := filepath.Join(t.TempDir(), f)
		if err := os.WriteFile(badPath, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := compose(composeSecrets, "-f", badPath, "config", "-q")
		if err == nil || !strings.Contains(string(out), "restart_policy_typo") {
			t.Errorf("%s with an unknown field: expected an error naming it, got %v:\n%s", f, err, out)
		}
	}
}

// TestComposeShard brings up deploy/compose/shard.yml: three members that
// elect a leader and seed example.org; a write through one member's API is
// answered by all three; a killed member leaves the others answering and
// writing.
func TestComposeShard(t *testing.T) {
	image := buildComposeImage(t)
	c := &composeProject{t: t, file: filepath.Join(harness.Repo, "deploy/compose/shard.yml"),
		project: fmt.Sprintf("craftdnsshard%d", os.Getpid()), image: image}
	took := c.up("http://127.0.0.1:8481/ready", "http://127.0.0.1:8482/ready", "http://127.0.0.1:8483/ready")
	t.Logf("docker-compose up to a ready shard: %v", took.Round(time.Millisecond))
	members := []string{"127.0.0.1:1381", "127.0.0.1:1382", "127.0.0.1:1383"}
	for _, m := range members {
		harness.Eventually(t, "the seeded zone on "+m, 30*time.Second, func() bool { return harness.HasA(m, "www.example.org", "192.0.2.10") })
	}
	api := harness.API{Base: "http://127.0.0.1:8382", Token: "compose-test-token"}
	// A write is sent again until it is acknowledged: right after a kill of
	// the leader the group takes an election timeout (1-2s) to elect
	// another, and answers 503 meanwhile (adding a record twice is adding
	// it once).
	write := func(name string) {
		t.Helper()
		harness.Eventually(t, "the write of "+name, 20*time.Second, func() bool {
			code, err := api.Do("POST", "/v1/zones/example.org/records", map[string]any{"add": []string{name + " 60 IN A 192.0.2.61"}}, nil)
			return err == nil && code == http.StatusOK
		})
	}
	write("compose1.example.org.")
	for _, m := range members {
		harness.Eventually(t, "the write on "+m, 20*time.Second, func() bool { return harness.HasA(m, "compose1.example.org", "192.0.2.61") })
	}
	c.run("kill", "a1")
	write("compose2.example.org.")
	for _, m := range members[1:] {
		harness.Eventually(t, "the write after the kill on "+m, 20*time.Second, func() bool { return harness.HasA(m, "compose2.example.org", "192.0.2.61") })
	}
}

// TestComposeSharded brings up deploy/compose/sharded.yml: two shards and two
// routers. A write through router 1 is answered through router 2 and by
// every member of the shard that holds the name, and by none of the other;
// after a member of each shard is killed, every query through either
// router still gets its answer.
func TestComposeSharded(t *testing.T) {
	image := buildComposeImage(t)
	c := &composeProject{t: t, file: filepath.Join(harness.Repo, "deploy/compose/sharded.yml"),
		project: fmt.Sprintf("craftdnssharded%d", os.Getpid()), image: image}
	var ready []string
	for _, p := range []int{8461, 8462, 8463, 8471, 8472, 8473, 8453, 8454} {
		ready = append(ready, fmt.Sprintf("http://127.0.0.1:%d/ready", p))
	}
	took := c.up(ready...)
	t.Logf("docker-compose up to two ready shards and routers: %v", took.Round(time.Millisecond))
	routers := []string{"127.0.0.1:1353", "127.0.0.1:1354"}
	for _, r := range routers {
		harness.Eventually(t, "example.org through "+r, 60*time.Second, func() bool { return harness.HasA(r, "www.example.org", "192.0.2.10") })
	}
	api := harness.API{Base: "http://127.0.0.1:8353", Token: "compose-test-token"}
	var names []string
	for i := range 6 {
		name := fmt.Sprintf("compose%d.example.org.", i)
		if code, err := api.Do("POST", "/v1/zones/example.org/records", map[string]any{"add": []string{name + " 60 IN A 192.0.2.62"}}, nil); err != nil || code != http.StatusOK {
			t.Fatalf("write %s through router 1: %d %v", name, code, err)
		}
		names = append(names, name)
	}
	for _, name := range names {
		if !harness.HasA(routers[1], name, "192.0.2.62") {
			t.Errorf("%s written through router 1 is not answered by router 2", name)
		}
		// Each member of the owning shard answers it, the others do not.
		holders := map[string]int{}
		for _, sh := range []string{"6", "7"} {
			for i := 1; i <= 3; i++ {
				m := fmt.Sprintf("127.0.0.1:13%s%d", sh, i)
				harness.Eventually(t, "an answer from "+m, 20*time.Second, func() bool {
					r, err := harness.Query(m, name, dns.TypeA)
					if err != nil {
						return false
					}
					if hasAddress(r, "192.0.2.62") {
						holders[sh]++
					}
					return true
				})
			}
		}
		if !(holders["6"] == 3 && holders["7"] == 0 || holders["6"] == 0 && holders["7"] == 3) {
			t.Errorf("%s: expected all three members of one shard to hold it, got %v", name, holders)
		}
	}

	c.run("kill", "a1", "b2")
	queries, failed := 0, 0
	for round := range 20 {
		for _, r := range routers {
			for _, q := range []struct{ name, ip string }{
				{"www.example.org.", "192.0.2.10"}, {"mail.example.org.", "192.0.2.25"},
				{names[round%len(names)], "192.0.2.62"}, {fmt.Sprintf("absent%d.example.org.", round), ""},
			} {
				queries++
				resp, err := harness.Query(r, q.name, dns.TypeA)
				switch {
				case err != nil:
					t.Errorf("%s via %s with a1 and b2 killed: %v", q.name, r, err)
					failed++
				case q.ip == "" && resp.Rcode != dns.RcodeNameError:
					t.Errorf("%s via %s: expected NXDOMAIN, got %s", q.name, r, dns.RcodeToString[resp.Rcode])
					failed++
				case q.ip != "" && !hasAddress(resp, q.ip):
					t.Errorf("%s via %s: expected %s, got %s %v", q.name, r, q.ip, dns.RcodeToString[resp.Rcode], resp.Answer)
					failed++
				}
			}
		}
	}
	t.Logf("with a1 and b2 killed: %d queries through the routers, %d failed", queries, failed)
}
