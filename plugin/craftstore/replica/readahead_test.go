package replica

import (
	"os"
	"path/filepath"
	"testing"
)

// TestReadAhead: the kernel's available memory is read (a member would
// otherwise never read its file ahead), and reading a file ahead, or a
// missing one, leaves it to be opened as before.
func TestReadAhead(t *testing.T) {
	if m := memAvailable(); m <= 0 {
		t.Errorf("MemAvailable of /proc/meminfo read as %d", m)
	}
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, make([]byte, 3<<20+5), 0o600); err != nil {
		t.Fatal(err)
	}
	readAhead(path)
	readAhead(filepath.Join(t.TempDir(), "missing"))
	if b, err := os.ReadFile(path); err != nil || len(b) != 3<<20+5 {
		t.Errorf("the file after reading ahead: %d bytes, %v", len(b), err)
	}
}
