package transport

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/craftdns/craftdns/internal/certs"

	"go.etcd.io/raft/v3/raftpb"
)

// testCA makes a CA and writes its certificate to dir.
func testCA(t *testing.T, dir, name string) (*certs.Authority, string) {
	t.Helper()
	ca, err := certs.NewAuthority(name, time.Now().Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	path, err := ca.WriteCA(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	return ca, path
}

// memberTLS issues a certificate from ca and loads it with caFile as the
// CA the member trusts.
func memberTLS(t *testing.T, dir string, ca *certs.Authority, name, caFile string) *TLS {
	t.Helper()
	cert, key, err := ca.WriteMember(dir, name, 1)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := LoadTLS(cert, key, caFile)
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

func startTLSTransport(t *testing.T, id uint64, r Raft, tl *TLS) *Transport {
	t.Helper()
	return startTransport(t, Config{ID: id, Cluster: "c", Listen: "127.0.0.1:0", Raft: r,
		Snapshotter: newHashSnapshotter(1, 0), TLS: tl, StreamTimeout: 400 * time.Millisecond})
}

// TestTLS: members with certificates from the group's CA exchange messages
// and snapshots over mutual TLS; a member whose certificate another CA
// signed can neither send to them nor be sent to, and neither can a plain
// TCP client that speaks the protocol.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caFile := testCA(t, dir, "group-ca")
	other, otherFile := testCA(t, dir, "other-ca")
	ra, rb, rc := newFakeRaft(), newFakeRaft(), newFakeRaft()
	a := startTLSTransport(t, 1, ra, memberTLS(t, dir, ca, "m1", caFile))
	b := startTransport(t, Config{ID: 2, Cluster: "c", Listen: "127.0.0.1:0", Raft: rb,
		Snapshotter: newHashSnapshotter(7, 3<<20), TLS: memberTLS(t, dir, ca, "m2", caFile)})
	a.AddPeer(2, b.Addr().String())
	b.AddPeer(1, a.Addr().String())
	a.Send([]*raftpb.Message{msg(raftpb.MessageType_MsgApp, 1, 2, 1)})
	b.Send([]*raftpb.Message{msg(raftpb.MessageType_MsgAppResp, 2, 1, 1)})
	eventually(t, "messages both ways", func() bool { return rb.count(1) == 1 && ra.count(2) == 1 })
	// A snapshot travels on a TLS connection of its own.
	sa := newHashSnapshotter(1, 0)
	a.cfg.Snapshotter = sa
	b.Send([]*raftpb.Message{snapMsg(2, 1, 9)})
	select {
	case got := <-sa.got:
		if got.err != nil || got.sum != genSum(7, 3<<20) {
			t.Fatalf("snapshot over TLS: %v, sum matches %v", got.err, got.sum == genSum(7, 3<<20))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no snapshot over TLS")
	}

	// Member 3 has a certificate from another CA (and trusts that CA): it
	// reaches neither, and they do not reach it.
	c := startTLSTransport(t, 3, rc, memberTLS(t, dir, other, "m3", otherFile))
	c.AddPeer(2, b.Addr().String())
	a.AddPeer(3, c.Addr().String())
	c.Send([]*raftpb.Message{msg(raftpb.MessageType_MsgApp, 3, 2, 5)})
	a.Send([]*raftpb.Message{msg(raftpb.MessageType_MsgHeartbeat, 1, 3, 5)})
	eventually(t, "both refusals reported", func() bool { return rc.unreachableCount(2) > 0 && ra.unreachableCount(3) > 0 })
	// Member 3 also trusting the group's CA does not help: its own
	// certificate is what the group refuses.
	both := filepath.Join(dir, "both.pem")
	os.WriteFile(both, append(append([]byte{}, ca.PEM...), other.PEM...), 0o644)
	d := startTLSTransport(t, 4, newFakeRaft(), memberTLS(t, dir, other, "m4", both))
	d.AddPeer(2, b.Addr().String())
	for range 5 {
		d.Send([]*raftpb.Message{msg(raftpb.MessageType_MsgApp, 4, 2, 6)})
		c.Send([]*raftpb.Message{msg(raftpb.MessageType_MsgApp, 3, 2, 6)})
		time.Sleep(50 * time.Millisecond)
	}

	// A plain client that speaks the protocol gets no handshake reply.
	conn, err := net.Dial("tcp", b.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	frame, _ := appendFrame(nil, msg(raftpb.MessageType_MsgApp, 1, 2, 7))
	conn.Write(append(handshake{kind: kindStream, from: 1, to: 2, cluster: "c"}.encode(), frame...))
	var reply [1]byte
	if n, err := conn.Read(reply[:]); err == nil && reply[0] == replyOK {
		t.Errorf("a plain client was accepted (%d bytes)", n)
	}
	conn.Close()

	// A TLS client without a certificate is refused too.
	tc, err := tls.Dial("tcp", b.Addr().String(), &tls.Config{InsecureSkipVerify: true})
	if err == nil {
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		tc.Write(append(handshake{kind: kindStream, from: 1, to: 2, cluster: "c"}.encode(), frame...))
		if _, err := tc.Read(reply[:]); err == nil {
			t.Errorf("a TLS client without a certificate got a reply %d", reply[0])
		}
		tc.Close()
	}
	time.Sleep(100 * time.Millisecond)
	for from, want := range map[uint64]int{1: 1, 3: 0, 4: 0} {
		if got := rb.count(from); got != want {
			t.Errorf("member 2 got %d messages from member %d, expected %d", got, from, want)
		}
	}
	if got := rc.count(1); got != 0 {
		t.Errorf("member 3 got %d messages from member 1", got)
	}
}

// TestTLSReload: new certificates cut the connections made with the old
// ones; a member whose certificate the new CA did not sign is cut off.
func TestTLSReload(t *testing.T) {
	dir := t.TempDir()
	ca, caFile := testCA(t, dir, "ca1")
	ca2, ca2File := testCA(t, dir, "ca2")
	ra, rb := newFakeRaft(), newFakeRaft()
	a := startTLSTransport(t, 1, ra, memberTLS(t, dir, ca, "m1", caFile))
	b := startTLSTransport(t, 2, rb, memberTLS(t, dir, ca, "m2", caFile))
	a.AddPeer(2, b.Addr().String())
	a.Send([]*raftpb.Message{msg(raftpb.MessageType_MsgApp, 1, 2, 1)})
	eventually(t, "a message", func() bool { return rb.count(1) == 1 })

	same := memberTLS(t, dir, ca, "m2", caFile) // other files, another key: changes
	if changed, err := b.SetTLS(b.tls.Load()); changed || err != nil {
		t.Fatalf("the same certificates changed something: %v %v", changed, err)
	}
	if _, err := b.SetTLS(nil); err == nil {
		t.Fatal("TLS turned off by a reload")
	}
	if changed, err := b.SetTLS(same); !changed || err != nil {
		t.Fatalf("new certificates: changed %v, %v", changed, err)
	}
	// The reload cut the stream: what was written on it meanwhile is lost,
	// as on any broken connection (Raft sends again).
	eventually(t, "a message after the reload", func() bool {
		a.Send([]*raftpb.Message{msg(raftpb.MessageType_MsgApp, 1, 2, 2)})
		return rb.count(1) >= 2
	})

	// The group moves to CA 2; member 1 still has its CA 1 certificate.
	if _, err := b.SetTLS(memberTLS(t, dir, ca2, "m2b", ca2File)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // what was in flight has arrived
	before, took := ra.unreachableCount(2), rb.count(1)
	for i := range 20 {
		a.Send([]*raftpb.Message{msg(raftpb.MessageType_MsgApp, 1, 2, uint64(3+i))})
		time.Sleep(20 * time.Millisecond)
	}
	if got := rb.count(1); got != took {
		t.Errorf("member 2 took %d messages after the move to CA 2; it must refuse member 1's", got-took)
	}
	if ra.unreachableCount(2) == before {
		t.Error("member 1 was not told that member 2 refuses it")
	}
}

// TestLoadTLSErrors: missing or mismatched files are refused with an error
// that names them.
func TestLoadTLSErrors(t *testing.T) {
	dir := t.TempDir()
	ca, caFile := testCA(t, dir, "ca")
	other, otherFile := testCA(t, dir, "other")
	cert, key, _ := ca.WriteMember(dir, "m1", 1)
	_, key2, _ := ca.WriteMember(dir, "m2", 1)
	otherCert, otherKey, _ := other.WriteMember(dir, "o1", 1)
	empty := filepath.Join(dir, "empty.pem")
	os.WriteFile(empty, []byte("no pem here\n"), 0o644)
	expiredCert, expiredKey := filepath.Join(dir, "old.pem"), filepath.Join(dir, "old-key.pem")
	c, k, _ := ca.Issue("old", time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))
	os.WriteFile(expiredCert, c, 0o644)
	os.WriteFile(expiredKey, k, 0o600)
	if _, err := LoadTLS(cert, key, caFile); err != nil {
		t.Fatalf("good files: %v", err)
	}
	tests := []struct {
		cert, key, ca string
		want          string
	}{
		{filepath.Join(dir, "missing.pem"), key, caFile, "missing.pem"},
		{cert, filepath.Join(dir, "missing-key.pem"), caFile, "missing-key.pem"},
		{cert, key, filepath.Join(dir, "missing-ca.pem"), "missing-ca.pem"},
		{cert, key2, caFile, "private key does not match"},
		{cert, key, empty, "holds no PEM certificate"},
		{otherCert, otherKey, caFile, "unknown authority"},
		{cert, key, otherFile, "unknown authority"},
		{expiredCert, expiredKey, caFile, "expired"},
		{key, key, caFile, "m1-key.pem"},
	}
	for i, tc := range tests {
		_, err := LoadTLS(tc.cert, tc.key, tc.ca)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("test %d: expected an error with %q, got %v", i, tc.want, err)
		}
	}
}
