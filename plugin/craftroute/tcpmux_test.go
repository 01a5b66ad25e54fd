package craftroute

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/craftdns/craftdns/internal/certs"
)

// TestTCPMuxPipelined: queries share one connection, the answers come
// back in another order than the queries went (RFC 7766 §6.2.1.1), one
// longer than a waiter's buffer; a connection the member closes is dialed
// anew for the next query. The same over TLS (a member at a tls://
// address), where the new connection resumes the first one's session.
func TestTCPMuxPipelined(t *testing.T) {
	t.Run("tcp", func(t *testing.T) { testTCPMuxPipelined(t, false) })
	t.Run("tls", func(t *testing.T) { testTCPMuxPipelined(t, true) })
}

func testTCPMuxPipelined(t *testing.T, overTLS bool) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var client *tls.Config
	if overTLS {
		var server *tls.Config
		server, client = testTLSPair(t)
		l = tls.NewListener(l, server)
	}
	var conns sync.WaitGroup
	accepted := make(chan int, 8)
	resumed := make(chan bool, 8)
	go func() {
		for n := 0; ; n++ {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if tc, ok := c.(*tls.Conn); ok {
				if err := tc.Handshake(); err != nil {
					t.Errorf("connection %d: %v", n, err)
				}
				resumed <- tc.ConnectionState().DidResume
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
	u := newTCPMux(l.Addr().String(), client)
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
	if overTLS && (<-resumed || !<-resumed) {
		t.Error("expected a full handshake first, then a resumed session")
	}
	l.Close()
	conns.Wait()
}

// testTLSPair returns a member's TLS configuration, with a certificate for
// 127.0.0.1 from a new CA, and a router's that trusts that CA.
func testTLSPair(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	ca, err := certs.NewAuthority("test CA", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue("member", time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	client = defaultTLS()
	client.RootCAs = pool
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, client
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
