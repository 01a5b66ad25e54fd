package check

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
	"github.com/craftdns/craftdns/internal/certs"

	corev1 "k8s.io/api/core/v1"
)

func TestMain(m *testing.M) { harness.Main(m) }

// cluster runs the manifests' pods as Docker containers on a network of
// their own, named and wired as Kubernetes would: the pod's host name is
// its name, a StatefulSet's pods are found as NAME.SERVICE (the headless
// Service), ConfigMaps and Secrets are files mounted where the pod spec
// mounts them, the environment is the container's (fieldRef metadata.name,
// secretKeyRef), a PersistentVolumeClaim is a volume of its own. Nothing
// else of Kubernetes runs: no Kubernetes API (a member that stops cannot
// ask for its StatefulSet and stays a voter) and no Service addresses (the
// test reaches pods through published ports).
type cluster struct {
	t       *testing.T
	docker  string
	image   string
	network string
	suffix  string
	m       *manifests
	dir     string
	files   map[string]string // ConfigMap or Secret name → host directory
}

func (c *cluster) run(args ...string) string {
	c.t.Helper()
	out, err := exec.Command(c.docker, args...).CombinedOutput()
	if err != nil {
		c.t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// newCluster builds the image from the test's binary (as make image
// does), writes the ConfigMaps, the Secrets and a Raft TLS secret made
// with a CA of the test's own as files, and makes the network.
func newCluster(t *testing.T, m *manifests) *cluster {
	c := &cluster{t: t, docker: harness.RequireDocker(t), m: m, suffix: fmt.Sprint(os.Getpid()), files: map[string]string{}}
	c.dir = t.TempDir()
	if err := os.Chmod(c.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := filepath.Join(c.dir, "image")
	must(t, os.MkdirAll(filepath.Join(ctx, "data"), 0o755))
	for src, dst := range map[string]string{harness.Binary: "coredns", "deploy/docker/Dockerfile": "Dockerfile",
		"deploy/docker/Corefile": "Corefile", "Corefile.examples/zones/example.org.zone": "example.org.zone"} {
		if !filepath.IsAbs(src) {
			src = filepath.Join(harness.Repo, src)
		}
		b, err := os.ReadFile(src)
		must(t, err)
		must(t, os.WriteFile(filepath.Join(ctx, dst), b, 0o755))
	}
	c.image = "craftdns:k8s-" + c.suffix
	c.run("build", "-q", "-t", c.image, ctx)
	t.Cleanup(func() { exec.Command(c.docker, "rmi", "-f", c.image).Run() })

	write := func(name string, data map[string]string) {
		d := filepath.Join(c.dir, name)
		must(t, os.MkdirAll(d, 0o755))
		for k, v := range data {
			must(t, os.WriteFile(filepath.Join(d, k), []byte(v), 0o644))
		}
		c.files[name] = d
	}
	for name, cm := range m.configMaps {
		write(name, cm.Data)
	}
	for name, s := range m.secrets {
		data := map[string]string{}
		for k, v := range s.StringData {
			data[k] = v
		}
		for k, v := range s.Data {
			data[k] = string(v)
		}
		for k, v := range data {
			// As secrets.yaml asks: a value of the operator's own for
			// each placeholder (craftdns refuses to start with one).
			if strings.Contains(v, "change-me") {
				data[k] = randomHex(t)
			}
		}
		write(name, data)
	}
	ca, err := certs.NewAuthority("craftdns k8s test CA", time.Now().AddDate(1, 0, 0))
	must(t, err)
	cert, key, err := ca.Issue("member", time.Now().Add(-time.Hour), time.Now().AddDate(1, 0, 0))
	must(t, err)
	write("craftdns-raft-tls", map[string]string{"ca.crt": string(ca.PEM), "tls.crt": string(cert), "tls.key": string(key)})

	c.network = "craftdns-k8s-" + c.suffix
	c.run("network", "create", c.network)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := exec.Command(c.docker, "ps", "-a", "--filter", "network="+c.network, "--format", "{{.Names}}").Output()
			for _, n := range strings.Fields(string(out)) {
				logs, _ := exec.Command(c.docker, "logs", "--tail", "30", n).CombinedOutput()
				t.Logf("%s:\n%s", n, logs)
			}
		}
		out, _ := exec.Command(c.docker, "ps", "-aq", "--filter", "network="+c.network).Output()
		if ids := strings.Fields(string(out)); len(ids) > 0 {
			exec.Command(c.docker, append([]string{"rm", "-f", "-v"}, ids...)...).Run()
		}
		exec.Command(c.docker, "network", "rm", c.network).Run()
		out, _ = exec.Command(c.docker, "volume", "ls", "-q", "--filter", "label=craftdns-k8s-test="+c.suffix).Output()
		if vs := strings.Fields(string(out)); len(vs) > 0 {
			exec.Command(c.docker, append([]string{"volume", "rm", "-f"}, vs...)...).Run()
		}
	})
	return c
}

// randomHex is 16 random bytes in hex, as openssl rand -hex 16 prints them.
func randomHex(t *testing.T) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// pod runs the pod of tpl named name (its host name), found on the network
// also as each of aliases, with the container's ports in publish published
// on 127.0.0.1 (the pod spec's port names); a PersistentVolumeClaim
// template's claim is a Docker volume of the pod.
func (c *cluster) pod(name string, aliases []string, tpl corev1.PodTemplateSpec, claims []string, publish ...string) string {
	c.t.Helper()
	spec := tpl.Spec
	ctr := spec.Containers[0]
	container := name + "-" + c.suffix
	args := []string{"run", "-d", "--name", container, "--hostname", name, "--network", c.network}
	for _, a := range aliases {
		args = append(args, "--network-alias", a)
	}
	if sc := spec.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			group := *sc.RunAsUser
			if sc.RunAsGroup != nil {
				group = *sc.RunAsGroup
			}
			args = append(args, "--user", fmt.Sprintf("%d:%d", *sc.RunAsUser, group))
		}
		for _, s := range sc.Sysctls {
			args = append(args, "--sysctl", s.Name+"="+s.Value)
		}
	}
	if sc := ctr.SecurityContext; sc != nil {
		if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
			args = append(args, "--read-only")
		}
		if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
			args = append(args, "--security-opt", "no-new-privileges")
		}
		if sc.Capabilities != nil {
			for _, d := range sc.Capabilities.Drop {
				args = append(args, "--cap-drop", string(d))
			}
		}
	}
	for _, e := range ctr.Env {
		v := e.Value
		switch {
		case e.ValueFrom == nil:
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			v = name
		case e.ValueFrom.SecretKeyRef != nil:
			b, err := os.ReadFile(filepath.Join(c.files[e.ValueFrom.SecretKeyRef.Name], e.ValueFrom.SecretKeyRef.Key))
			must(c.t, err)
			v = string(b)
		default:
			c.t.Fatalf("pod %s: env %s: a source the test does not provide", name, e.Name)
		}
		args = append(args, "-e", e.Name+"="+v)
	}
	sources := map[string]string{}
	for _, v := range spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			sources[v.Name] = c.files[v.ConfigMap.Name]
		case v.Secret != nil:
			sources[v.Name] = c.files[v.Secret.SecretName]
		}
	}
	for _, claim := range claims {
		vol := "craftdns-k8s-" + claim + "-" + name + "-" + c.suffix
		c.run("volume", "create", "--label", "craftdns-k8s-test="+c.suffix, vol)
		sources[claim] = vol
	}
	for _, vm := range ctr.VolumeMounts {
		src, ok := sources[vm.Name]
		if !ok {
			c.t.Fatalf("pod %s: mount %s: no volume", name, vm.Name)
		}
		mode := ""
		if vm.ReadOnly {
			mode = ":ro"
		}
		args = append(args, "-v", src+":"+vm.MountPath+mode)
	}
	ports := map[string]corev1.ContainerPort{}
	for _, p := range ctr.Ports {
		ports[p.Name] = p
	}
	for _, name := range publish {
		p, ok := ports[name]
		if !ok {
			c.t.Fatalf("no container port %s", name)
		}
		args = append(args, "-p", fmt.Sprintf("127.0.0.1::%d/%s", p.ContainerPort, strings.ToLower(string(p.Protocol))))
	}
	args = append(args, c.image)
	args = append(args, ctr.Args...)
	c.run(args...)
	return container
}

// port returns the host address a container's port is published on.
func (c *cluster) port(container string, port int32, proto string) string {
	c.t.Helper()
	out := c.run("port", container, fmt.Sprintf("%d/%s", port, proto))
	addr := strings.Fields(strings.Split(out, "\n")[0])
	return addr[len(addr)-1]
}

func waitHTTP(t *testing.T, url string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer 200 in %v: %v", url, d, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestCorefilesRun runs the ConfigMaps' Corefiles with the image, as the
// manifests' pods: shards a and b (three members each, the member
// Corefile, Raft over mutual TLS between stable names) and a router (the
// router Corefile, which seeds example.org). Through the router: the zone
// answers and a write through its API is read back. Scaling shard a up
// (pod craftdns-a-3) adds member 4 through the members' API, which votes
// once caught up. With a member of each shard killed, the router still
// answers.
func TestCorefilesRun(t *testing.T) {
	m := loadManifests(t)
	c := newCluster(t, m)
	start := time.Now()
	var a0 string
	for _, shard := range []string{"a", "b"} {
		sts := m.statefulSets["craftdns-"+shard]
		var claims []string
		for _, vc := range sts.Spec.VolumeClaimTemplates {
			claims = append(claims, vc.Name)
		}
		for i := range *sts.Spec.Replicas {
			name := fmt.Sprintf("%s-%d", sts.Name, i)
			pub := []string{}
			if name == "craftdns-a-0" {
				pub = []string{"api", "ready"}
			}
			ctr := c.pod(name, []string{name + "." + sts.Spec.ServiceName}, sts.Spec.Template, claims, pub...)
			if name == "craftdns-a-0" {
				a0 = ctr
			}
		}
	}
	d := m.deployments["craftdns-router"]
	router := c.pod("craftdns-router-0", nil, d.Spec.Template, nil, "dns", "dns-tcp", "api", "ready")
	dnsAddr := c.port(router, 53, "udp")
	apiAddr := c.port(router, 8053, "tcp")
	waitHTTP(t, "http://"+c.port(router, 8181, "tcp")+"/ready", 120*time.Second)
	waitHTTP(t, "http://"+c.port(a0, 8181, "tcp")+"/ready", 60*time.Second)
	t.Logf("from docker run to a ready router over two ready shards: %v", time.Since(start).Round(100*time.Millisecond))

	harness.Eventually(t, "www.example.org through the router", 60*time.Second, func() bool {
		return harness.HasA(dnsAddr, "www.example.org", "192.0.2.10")
	})
	token, err := os.ReadFile(filepath.Join(c.files["craftdns-api"], "token"))
	must(t, err)
	api := harness.API{Base: "http://" + apiAddr, Token: string(token)}
	if code, err := api.Do("POST", "/v1/zones/example.org/records", map[string]any{"add": []string{"k8s-test 300 IN A 192.0.2.77", "k8s-two 300 IN A 192.0.2.78"}}, nil); err != nil || code != http.StatusOK {
		t.Fatalf("a write through the router's API: %d %v", code, err)
	}
	for _, n := range []string{"k8s-test", "k8s-two"} {
		if !harness.HasA(dnsAddr, n+".example.org", map[string]string{"k8s-test": "192.0.2.77", "k8s-two": "192.0.2.78"}[n]) {
			t.Errorf("%s.example.org: the write through the router is not answered", n)
		}
	}

	// Scale shard a up: the fourth pod joins by itself.
	sts := m.statefulSets["craftdns-a"]
	c.pod("craftdns-a-3", []string{"craftdns-a-3.craftdns-a"}, sts.Spec.Template, []string{"data"})
	memberAPI := harness.API{Base: "http://" + c.port(a0, 8053, "tcp"), Token: string(token)}
	harness.Eventually(t, "member 4 of shard a voting", 60*time.Second, func() bool {
		var st struct {
			Members []struct {
				ID      uint64 `json:"id"`
				Raft    string `json:"raft"`
				Learner bool   `json:"learner"`
			} `json:"members"`
		}
		if code, err := memberAPI.Do("GET", "/v1/cluster", nil, &st); err != nil || code != http.StatusOK {
			return false
		}
		for _, x := range st.Members {
			if x.ID == 4 && !x.Learner && x.Raft == "craftdns-a-3.craftdns-a:7000" {
				return len(st.Members) == 4
			}
		}
		return false
	})

	// A member of each shard killed: the router answers from the others.
	c.run("kill", "craftdns-a-1-"+c.suffix, "craftdns-b-2-"+c.suffix)
	for i := range 20 {
		name := fmt.Sprintf("k8s-%d.example.org", i)
		if i == 0 {
			name = "k8s-test.example.org"
		}
		r, err := harness.Query(dnsAddr, name, 1)
		if err != nil || (r.Rcode != 0 && r.Rcode != 3) {
			t.Errorf("%s through the router with two members killed: %v %v", name, r, err)
		}
	}
	if _, _, err := net.SplitHostPort(dnsAddr); err != nil {
		t.Fatal(err)
	}
}
