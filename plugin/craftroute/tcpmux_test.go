package craftroute

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// TestTCPMuxPipelined: queries share one connection, the answers come
// back in another order than the queries went (RFC 7766 §6.2.1.1), one
// longer than a waiter's buffer; a connection the member closes is dialed
// anew for the next query.
func TestTCPMuxPipelined(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var conns sync.WaitGroup
	accepted := make(chan int, 8)
	go func() {
		for n := 0; ; n++ {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- n
			conns.Add(1)
			go func() {
				defer conns.Done()
				defer c.Close()
				// Read three queries, answer them last first, each
				// answer its query with a tail: the third's over 4 KiB.
				var qs [][]byte
				for range 3 {
					var lb [2]byte
					if _, err := io.ReadFull(c, lb[:]); err != nil {
						return
					}
					q := make([]byte, binary.BigEndian.Uint16(lb[:]))
					if _, err := io.ReadFull(c, q); err != nil {
						return
					}
					qs = append(qs, q)
				}
				for i := len(qs) - 1; i >= 0; i-- {
					a := append([]byte(nil), qs[i]...)
					a = append(a, make([]byte, []int{10, 100, 5000}[i])...)
					c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(a))), a...))
				}
				// Then close: the member's idle timeout.
			}()
		}
	}()
	u := newTCPMux(l.Addr().String(), nil)
	defer u.close()
	if n := muxSockets(); n < 1 {
		t.Fatal("no sockets")
	}
	u.mu.Lock()
	u.conns = make([]*tcpConn, 1) // one connection: the three share it
	u.mu.Unlock()
	run := func() {
		var wg sync.WaitGroup
		for i, tail := range []int{10, 100, 5000} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Sent in order: the server reads them as they come.
				time.Sleep(time.Duration(i) * 50 * time.Millisecond)
				w := waiters.Get().(*waiter)
				defer waiters.Put(w)
				q := []byte{0, 0, byte(i), 1, 2, 3}
				ans, err := u.exchange(q, w, 5*time.Second)
				if err != nil {
					t.Errorf("query %d: %v", i, err)
					return
				}
				if len(ans) != len(q)+tail || ans[2] != byte(i) {
					t.Errorf("query %d: answer of %d bytes for query %d", i, len(ans), ans[2])
				}
			}()
		}
		wg.Wait()
	}
	run()
	if n := <-accepted; n != 0 {
		t.Fatalf("connection %d", n)
	}
	time.Sleep(100 * time.Millisecond) // the server closed it
	run()
	if n := <-accepted; n != 1 {
		t.Fatalf("the second round used connection %d, want a new one", n)
	}
	l.Close()
	conns.Wait()
}

// TestWaiterEmptyAfterRefused: queries to a member that is gone fail, and
// their waiters go back to the pool with nothing left in their channels
// (a left-over code would fail the next query that takes the waiter, and
// the router would mark a live member down).
func TestWaiterEmptyAfterRefused(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close() // nobody listens: ICMP port unreachable
	u := newUDPMux(addr)
	defer u.close()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				w := &waiter{ch: make(chan int, 1), t: time.NewTimer(time.Hour)}
				q := []byte{0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}
				if _, err := u.exchange(q, w, 200*time.Millisecond); err == nil {
					t.Error("an answer from nobody")
				}
				select {
				case n := <-w.ch:
					t.Errorf("waiter left with %d in its channel", n)
					return
				default:
				}
			}
		}()
	}
	wg.Wait()
}
