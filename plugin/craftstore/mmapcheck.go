package craftstore

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// mmapWorks reports whether files in dir, or in its nearest existing
// ancestor when dir does not exist yet, can be memory-mapped: bbolt maps
// its file in both memory modes (a paged member answers from the map), and
// some filesystems (some FUSE and network mounts) refuse. It maps a page of
// a temporary file it then removes. A directory it cannot write to passes:
// the member's start says so with the open error.
var mmapWorks = func(dir string) error {
	for {
		if _, err := os.Stat(dir); err == nil || !errors.Is(err, fs.ErrNotExist) {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil
		}
		dir = parent
	}
	f, err := os.CreateTemp(dir, ".craftstore-mmap-*")
	if err != nil {
		return nil
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := f.Truncate(int64(os.Getpagesize())); err != nil {
		return nil
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, os.Getpagesize(), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return err
	}
	return syscall.Munmap(b)
}
