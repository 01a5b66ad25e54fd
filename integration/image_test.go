package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
)

// run runs a command and fails the test with its output when it fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestImage builds the container image with `make image` and runs it as
// its default command does, reachable from outside the container: DNS
// answers the seeded zone, the API (opened with CRAFTDNS_API and a token)
// takes a write, the process runs as user 65532, stops with exit 0 on
// `docker stop`, and the write is still there after a restart on the same
// volume. It logs the image size.
func TestImage(t *testing.T) {
	docker := harness.RequireDocker(t)
	image := fmt.Sprintf("craftdns:itest-%d", os.Getpid())
	start := time.Now()
	run(t, "make", "-C", harness.Repo, "--no-print-directory", "image", "IMAGE="+image)
	t.Cleanup(func() { exec.Command(docker, "rmi", "-f", image).Run() })
	size, err := strconv.ParseInt(run(t, docker, "image", "inspect", image, "--format", "{{.Size}}"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("image %s: %.1f MB, built in %v", image, float64(size)/1e6, time.Since(start).Round(time.Millisecond))

	dnsPort, apiPort, readyPort := harness.ListenPort(t), harness.ListenPort(t), harness.ListenPort(t)
	name := fmt.Sprintf("craftdns-itest-%d", os.Getpid())
	volume := name + "-data"
	t.Cleanup(func() {
		exec.Command(docker, "rm", "-f", "-v", name).Run()
		exec.Command(docker, "volume", "rm", "-f", volume).Run()
	})
	run(t, docker, "run", "-d", "--name", name, "-v", volume+":/data",
		"-e", "CRAFTDNS_API=0.0.0.0:8053", "-e", "CRAFTDNS_API_TOKEN=image-test-token",
		"-p", fmt.Sprintf("127.0.0.1:%d:53/udp", dnsPort), "-p", fmt.Sprintf("127.0.0.1:%d:53/tcp", dnsPort),
		"-p", fmt.Sprintf("127.0.0.1:%d:8053", apiPort), "-p", fmt.Sprintf("127.0.0.1:%d:8181", readyPort), image)
	logs := func() string { out, _ := exec.Command(docker, "logs", name).CombinedOutput(); return string(out) }
	ready := fmt.Sprintf("http://127.0.0.1:%d/ready", readyPort)
	dnsAddr := fmt.Sprintf("127.0.0.1:%d", dnsPort)
	waitServing := func() {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !harness.HasA(dnsAddr, "www.example.org", "192.0.2.10") {
			if time.Now().After(deadline) {
				t.Fatalf("the container never answered www.example.org; logs:\n%s", logs())
			}
			time.Sleep(200 * time.Millisecond)
		}
		harness.WaitReady(t, ready)
	}
	waitServing()

	if user := run(t, docker, "inspect", name, "--format", "{{.Config.User}}"); user != "65532:65532" {
		t.Errorf("the container runs as %q, expected 65532:65532", user)
	}
	api := harness.API{Base: fmt.Sprintf("http://127.0.0.1:%d", apiPort), Token: "image-test-token"}
	body := map[string]any{"add": []string{"image.example.org. 60 IN A 192.0.2.33"}}
	if code, err := api.Do("POST", "/v1/zones/example.org/records", body, nil); err != nil || code != http.StatusOK {
		t.Fatalf("write through the container's API: %d %v\n%s", code, err, logs())
	}
	if code, _ := (harness.API{Base: api.Base}).Do("POST", "/v1/zones/example.org/records", body, nil); code != http.StatusUnauthorized {
		t.Errorf("a write without the token: expected 401, got %d", code)
	}
	harness.Eventually(t, "the write answered", 10*time.Second, func() bool { return harness.HasA(dnsAddr, "image.example.org", "192.0.2.33") })

	run(t, docker, "stop", "-t", "20", name)
	if code := run(t, docker, "inspect", name, "--format", "{{.State.ExitCode}}"); code != "0" {
		t.Errorf("docker stop: exit %s, expected 0; logs:\n%s", code, logs())
	}
	run(t, docker, "start", name)
	waitServing()
	if !harness.HasA(dnsAddr, "image.example.org", "192.0.2.33") {
		t.Errorf("the write is gone after a restart on the same volume; logs:\n%s", logs())
	}

	// The API off loopback without a token: the start fails and says why.
	bad := name + "-notoken"
	t.Cleanup(func() { exec.Command(docker, "rm", "-f", "-v", bad).Run() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	exec.CommandContext(ctx, docker, "run", "--name", bad, "-e", "CRAFTDNS_API=0.0.0.0:8053", image).Run()
	if code := run(t, docker, "inspect", bad, "--format", "{{.State.ExitCode}}"); code == "0" {
		t.Error("the API off loopback without a token started")
	}
	if out, _ := exec.Command(docker, "logs", bad).CombinedOutput(); !strings.Contains(string(out), "needs a token") {
		t.Errorf("expected the start to say the API needs a token, got:\n%s", out)
	}
}
