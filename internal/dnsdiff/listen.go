package dnsdiff

import (
	"net"
	"testing"
)

// ListenUDPTCP returns a UDP socket and a TCP listener on the same free
// port of 127.0.0.1, for a test server that answers over both. The kernel
// picks the UDP port; another process may hold its TCP twin (an outgoing
// connection's), so it tries a few ports.
func ListenUDPTCP(t testing.TB) (net.PacketConn, net.Listener) {
	t.Helper()
	for try := 0; ; try++ {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, l
		}
		pc.Close()
		if try == 20 {
			t.Fatal(err)
		}
	}
}
