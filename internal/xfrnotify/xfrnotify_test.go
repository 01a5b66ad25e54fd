package xfrnotify

import (
	"sync"
	"testing"
	"time"

	clog "github.com/coredns/coredns/plugin/pkg/log"
)

func TestNotifierCoalesces(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	sent := map[string]int{}
	n := New([]string{"org."}, func(zone string) error {
		mu.Lock()
		sent[zone]++
		first := sent[zone] == 1
		mu.Unlock()
		if first {
			<-release // the first NOTIFY is slow
		}
		return nil
	}, clog.NewWithPlugin("test"))
	n.Settle = 10 * time.Millisecond
	for i := 0; i < 10; i++ {
		n.Changed("example.org.") // one in flight, the rest one pending
	}
	n.Changed("example.com.") // not this block's zone
	close(release)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		n.mu.Lock()
		idle := len(n.pending) == 0 // n.Idle(), with the lock held
		n.mu.Unlock()
		if idle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the NOTIFYs never finished")
		}
	}
	mu.Lock()
	if sent["example.org."] != 3 || sent["example.com."] != 0 {
		t.Errorf("expected 3 NOTIFYs for example.org. (two rounds and the trailing one) and none for example.com., got %v", sent)
	}
	mu.Unlock()
	n.Close()
	n.Changed("example.org.")
	if !n.Idle() {
		t.Error("expected a closed notifier to send nothing more")
	}
}
