package transport

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// FuzzReadHandshake: any bytes a dialer sends first are a handshake, which
// encodes back to what was read, or an error; never a panic.
func FuzzReadHandshake(f *testing.F) {
	f.Add(handshake{kind: kindStream, from: 1, to: 2, cluster: "craftdns"}.encode())
	f.Add(handshake{kind: kindSnapshot, from: 3, to: 1, cluster: ""}.encode())
	f.Add([]byte("CRFT"))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := readHandshake(bytes.NewReader(data))
		if err != nil {
			return
		}
		enc := h.encode()
		if !bytes.HasPrefix(data, enc) {
			t.Fatalf("handshake %+v encodes to %x, read from %x", h, enc, data)
		}
	})
}

// FuzzFrameReader: any bytes on a stream decode into Raft messages that
// frame again to messages equal to them, or end in an error; never a panic.
func FuzzFrameReader(f *testing.F) {
	var seed []byte
	seed, _ = appendFrame(seed, &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), To: proto.Uint64(2), From: proto.Uint64(1), Term: proto.Uint64(3)})
	seed = appendKeepalive(seed)
	seed, _ = appendFrame(seed, &raftpb.Message{Type: raftpb.MsgApp.Enum(), To: proto.Uint64(2), From: proto.Uint64(1),
		Entries: []*raftpb.Entry{{Term: proto.Uint64(3), Index: proto.Uint64(7), Data: []byte("entry")}}})
	f.Add(seed)
	f.Add([]byte{0, 0, 0, 3, 1, 2, 3})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		fr := &frameReader{r: bytes.NewReader(data)}
		for {
			m, err := fr.next()
			if errors.Is(err, io.EOF) || err != nil {
				return
			}
			if m == nil {
				continue // keepalive
			}
			b, err := appendFrame(nil, m)
			if err != nil {
				continue // decodes, but too large to send again
			}
			again, err := (&frameReader{r: bytes.NewReader(b)}).next()
			if err != nil || !proto.Equal(m, again) {
				t.Fatalf("message %v framed again decodes to %v, %v", m, again, err)
			}
		}
	})
}
