package replica

import (
	"bufio"
	"io"
	"os"
	"strconv"
	"strings"
)

// A member's start reads every page of its file in the order of the
// keys: bbolt finds its free pages by walking every bucket (the freelist
// is not stored: NoFreelistSync), and a paged member then counts its
// zones' records. A zone imported chunk by chunk has its pages in the
// order the chunks wrote them, beside the Raft log's, so from a cold file
// these reads are at random: 23-25 s for 10M records (a 2.1 GB file) on
// the benchmark machine, where reading the file from start to end takes
// 3.5 s. readAhead reads the file at path through once, in its own order,
// before bbolt opens it, when it takes at most half the memory the kernel
// has available (a larger file would push out as much as it brings in).
// posix_fadvise's WILLNEED does not do it: Linux reads ahead no more than
// its readahead window a call.
func readAhead(path string) {
	f, err := os.Open(path)
	if err != nil {
		return // a new member, or bbolt says why
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return
	}
	if avail := memAvailable(); avail == 0 || fi.Size() > avail/2 {
		return
	}
	buf := make([]byte, 1<<20)
	_, _ = io.CopyBuffer(io.Discard, struct{ io.Reader }{f}, buf)
}

// memAvailable returns MemAvailable of /proc/meminfo in bytes, 0 when it
// cannot be read.
func memAvailable() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
