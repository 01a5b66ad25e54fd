package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ShardedExampleRouter is the DNS address of router 1 of the sharded
// example.
const ShardedExampleRouter = "127.0.0.1:1153"

// StartShardedExample starts Corefile.examples/sharded/ as `make
// run-sharded` does, on its fixed ports, with router 1 alone in key mode
// key ("name", as the example has it, or "zone"): two shards of three
// members, example.org seeded through the router. It waits until every
// process is ready and returns the members' and the router's processes
// (a1 ... b3, router).
func StartShardedExample(t testing.TB, key string) []*Proc {
	t.Helper()
	wd := Workdir(t)
	router, err := os.ReadFile(filepath.Join(Repo, "Corefile.examples/sharded/router.Corefile"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(router), "        key name\n", "        key "+key+"\n", 1)
	if !strings.Contains(text, "        key "+key+"\n") {
		t.Fatalf("the sharded example's router has no key line")
	}
	if err := os.WriteFile(filepath.Join(wd, "router.Corefile"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	var procs []*Proc
	for _, m := range []string{"a1", "a2", "a3", "b1", "b2", "b3"} {
		procs = append(procs, Start(t, m, wd, "Corefile.examples/sharded/"+m+".Corefile"))
	}
	procs = append(procs, Start(t, "router", wd, "router.Corefile"))
	for _, p := range []int{8261, 8262, 8263, 8271, 8272, 8273, 8250} {
		WaitReady(t, fmt.Sprintf("http://127.0.0.1:%d/ready", p), procs...)
	}
	return procs
}
