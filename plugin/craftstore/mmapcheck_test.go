package craftstore

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/coredns/caddy"
)

// TestMmapWorks: a local directory passes, and so does one that does not
// exist yet (its nearest ancestor is probed); the probe leaves nothing.
func TestMmapWorks(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Join(dir, "not", "yet")} {
		if err := mmapWorks(d); err != nil {
			t.Errorf("mmapWorks(%s): %v", d, err)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("the probe left %v", ents)
	}
}

// TestDataWithoutMmap: a data directory whose filesystem refuses memory
// maps is a Corefile error naming its line. (No such filesystem can be
// mounted here without privileges a test should not use: the probe's
// answer is replaced.)
func TestDataWithoutMmap(t *testing.T) {
	old := mmapWorks
	mmapWorks = func(string) error { return syscall.ENODEV }
	defer func() { mmapWorks = old }()
	_, err := parse(caddy.NewTestController("dns", "craftstore {\n\tid 1\n\tdata /mnt/fuse/craftstore\n}"))
	if err == nil || !strings.Contains(err.Error(), "Testfile:3") || !strings.Contains(err.Error(), "data /mnt/fuse/craftstore: its filesystem cannot memory-map files") {
		t.Errorf("expected a Corefile error at line 3 about memory maps, got %v", err)
	}
}
