package replica

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// smallDisk mounts a tmpfs of size bytes for the test and returns its path.
// It needs root: in CI (CI=true) a failed mount fails the test, elsewhere
// it skips.
func smallDisk(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mounting a %d-byte tmpfs for the full-disk test (root is needed): %v %s", size, err, out)
		}
		t.Skipf("cannot mount a tmpfs (not root?): %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

// fill writes a file that leaves about free bytes on the file system of dir.
func fill(t *testing.T, dir string, free int64) string {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	n := int64(st.Bavail)*st.Bsize - free
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for n > 0 {
		k := min(n, int64(len(buf)))
		if _, err := f.Write(buf[:k]); err != nil {
			t.Fatalf("filling %s: %v", dir, err)
		}
		n -= k
	}
	return path
}

// TestDiskFullHeals: the leader's disk fills up, so it cannot persist its
// Raft state. It stops being ready and healthy and gives up leadership, and
// the other two elect a leader and go on acknowledging writes; once space is
// freed it resumes by itself, without a restart, catches up and has every
// acknowledged write, each applied once (its export equals the others').
func TestDiskFullHeals(t *testing.T) {
	disks := map[uint64]string{}
	c := &testCluster{t: t, dir: t.TempDir(), members: map[uint64]*Replica{}, dirs: map[uint64]string{}}
	for i := uint64(1); i <= 3; i++ {
		disks[i] = smallDisk(t, 16<<20)
		c.dirs[i] = filepath.Join(disks[i], "data")
	}
	c.addPeers(3)
	c.startAll()
	if _, err := c.leader().PutZone(ctx(t), "example.org.", parseTestZone(t), false); err != nil {
		t.Fatal(err)
	}
	eventually(t, "every member caught up", c.caughtUp)
	full := c.leader()
	filler := fill(t, disks[full.ID()], 64<<10)

	// Writes through the other two until the leader runs out of space.
	var acked []string
	write := func(via *Replica, n int) {
		for i := 0; i < n; i++ {
			var rrs []dns.RR
			name := fmt.Sprintf("d%d.example.org.", len(acked))
			for j := 0; j < 20; j++ {
				rrs = append(rrs, mustRR(t, fmt.Sprintf("%s 60 IN TXT \"%040d\"", name, j)))
			}
			if _, err := via.Change(ctx(t), "example.org.", rrs, nil); err == nil {
				acked = append(acked, name)
			}
		}
	}
	rest := c.others(full.ID())
	others := func() *Replica {
		for _, id := range rest {
			if c.members[id].IsLeader() {
				return c.members[id]
			}
		}
		return c.members[rest[0]]
	}
	deadline := time.Now().Add(60 * time.Second)
	for full.Healthy() && time.Now().Before(deadline) {
		write(others(), 20)
	}
	if full.Healthy() {
		t.Fatalf("expected member %d to fail persisting on a full disk after %d writes", full.ID(), len(acked))
	}
	t.Logf("member %d failing after %d writes: %v", full.ID(), len(acked), full.StorageError())
	eventually(t, "the full member not ready and not leader", func() bool { return !full.Ready() && !full.IsLeader() })
	eventually(t, "another leader", func() bool { return c.members[rest[0]].IsLeader() || c.members[rest[1]].IsLeader() })
	before := len(acked)
	write(others(), 50)
	if len(acked) < before+50 {
		t.Errorf("expected the other two to acknowledge every write while the full member's disk is full, got %d of 50", len(acked)-before)
	}
	if st, err := full.Status(); err != nil || st.StorageError == "" || st.Leader != 0 {
		t.Errorf("expected the full member's status to show the storage error and no leader, got %+v %v", st, err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the full member healthy and ready again", func() bool { return full.Healthy() && full.Ready() })
	write(others(), 10)
	c.settledNamesTXT(t, acked)
}

// settledNamesTXT waits until every member has applied the same index and
// checks that they export the same zone and have a TXT RRset at each name.
func (c *testCluster) settledNamesTXT(t *testing.T, names []string) {
	t.Helper()
	c.settled(t, nil)
	for _, r := range c.members {
		z := r.Zone("example.org.")
		for _, name := range names {
			if len(z.RRs(name, dns.TypeTXT)) != 20 {
				t.Errorf("member %d: expected 20 TXT records at acknowledged %s, got %d", r.ID(), name, len(z.RRs(name, dns.TypeTXT)))
				break
			}
		}
	}
}
