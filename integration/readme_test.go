package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"

	"github.com/miekg/dns"
)

// TestReadmeExamples starts every ~~~ corefile block of the plugins'
// READMEs and checks that the server comes up and answers DNS (a router
// whose shards are not running answers SERVFAIL, which counts).
func TestReadmeExamples(t *testing.T) {
	for _, plugin := range []string{"craftstore", "craftroute"} {
		t.Run(plugin, func(t *testing.T) { readmeExamples(t, plugin) })
	}
}

func readmeExamples(t *testing.T, plugin string) {
	readme, err := os.ReadFile(filepath.Join(harness.Repo, "plugin", plugin, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)~~~ corefile\n(.*?)~~~").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) == 0 {
		t.Fatal("expected corefile examples in the README")
	}
	port := regexp.MustCompile(`(?m)^(\S+):(\d+) \{`)
	for i, b := range blocks {
		t.Run(fmt.Sprint("example", i), func(t *testing.T) {
			wd := harness.Workdir(t)
			corefile := strings.ReplaceAll(b[1], "Corefile.examples/", filepath.Join(harness.Repo, "Corefile.examples")+"/")
			m := port.FindStringSubmatch(corefile)
			if m == nil {
				t.Fatalf("expected a zone:port server block in:\n%s", corefile)
			}
			if strings.Contains(corefile, "dnssec_kek data/kek") {
				writeKEK(t, filepath.Join(wd, "data/kek")) // made by the operator, as the README says
			}
			if err := os.WriteFile(filepath.Join(wd, "Corefile"), []byte(corefile), 0o644); err != nil {
				t.Fatal(err)
			}
			p := harness.Start(t, "example", wd, "Corefile")
			addr := "127.0.0.1:" + m[2]
			harness.Eventually(t, "a DNS answer from "+addr, 20*time.Second, func() bool {
				_, err := harness.Query(addr, m[1], dns.TypeSOA)
				return err == nil
			})
			p.Kill()
			if strings.Contains(p.Logs(), "panic") {
				t.Errorf("expected no panic, log:\n%s", p.Logs())
			}
		})
	}
}
