package faultnet

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func newLink(t *testing.T) *Link {
	t.Helper()
	n := New()
	t.Cleanup(n.Close)
	l, err := n.Link("a", "b", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

type client struct {
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, l *Link) *client {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{c: c, r: bufio.NewReader(c)}
}

// roundTrip sends line and returns the echo, or the read error after wait.
func (c *client) roundTrip(line string, wait time.Duration) (string, error) {
	if _, err := c.c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	c.c.SetReadDeadline(time.Now().Add(wait))
	s, err := c.r.ReadString('\n')
	return strings.TrimSuffix(s, "\n"), err
}

func TestPass(t *testing.T) {
	c := dial(t, newLink(t))
	if got, err := c.roundTrip("hello", 5*time.Second); err != nil || got != "hello" {
		t.Fatalf("expected the echo, got %q %v", got, err)
	}
}

func TestHoldDeliversLate(t *testing.T) {
	l := newLink(t)
	c := dial(t, l)
	if _, err := c.roundTrip("one", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	l.Set(Hold)
	if got, err := c.roundTrip("two", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("expected nothing through a held link, got %q %v", got, err)
	}
	// A connection dialled during the hold reaches the target after it.
	c2 := dial(t, l)
	c2.c.Write([]byte("three\n"))
	l.Set(Pass)
	c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := c.r.ReadString('\n'); err != nil || got != "two\n" {
		t.Fatalf("expected the held line after the hold, got %q %v", got, err)
	}
	c2.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := c2.r.ReadString('\n'); err != nil || got != "three\n" {
		t.Fatalf("expected the connection dialled during the hold to work, got %q %v", got, err)
	}
}

// TestHoldBlocksSender: a held link stops reading, so the sender's writes
// block once the kernel's buffers are full, as behind a real partition.
func TestHoldBlocksSender(t *testing.T) {
	l := newLink(t)
	c := dial(t, l)
	if _, err := c.roundTrip("one", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	l.Set(Hold)
	time.Sleep(50 * time.Millisecond) // the reader is parked before its next read
	c.c.SetWriteDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 1<<20)
	var sent int
	var err error
	for sent < 256<<20 && err == nil {
		var n int
		n, err = c.c.Write(buf)
		sent += n
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("expected writes to block on a held link, sent %d bytes, err %v", sent, err)
	}
}

func TestDropLosesBytes(t *testing.T) {
	l := newLink(t)
	c := dial(t, l)
	if _, err := c.roundTrip("one", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	l.Set(Drop)
	if got, err := c.roundTrip("lost", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("expected nothing through a dropping link, got %q %v", got, err)
	}
	l.Set(Pass)
	if got, err := c.roundTrip("after", 5*time.Second); err != nil || got != "after" {
		t.Fatalf("expected only the line sent after the drop, got %q %v", got, err)
	}
}

func TestResetClosesConnections(t *testing.T) {
	l := newLink(t)
	c := dial(t, l)
	if _, err := c.roundTrip("one", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	l.Set(Reset)
	c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.r.ReadByte(); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("expected a reset, got %v", err)
	}
	// A new connection is reset at once: the dial itself may see the reset
	// (Go's connect can report it when it lands first), or the first read.
	if c2, err := net.Dial("tcp", l.Addr()); err == nil {
		defer c2.Close()
		c2.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c2.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("expected a new connection reset at once, got %v", err)
		}
	} else if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("expected a new connection reset at once, got %v", err)
	}
	l.Set(Pass)
	c3 := dial(t, l)
	if got, err := c3.roundTrip("back", 5*time.Second); err != nil || got != "back" {
		t.Fatalf("expected new connections to work after the reset, got %q %v", got, err)
	}
}

func TestDelay(t *testing.T) {
	l := newLink(t)
	c := dial(t, l)
	l.SetDelay(200 * time.Millisecond)
	start := time.Now()
	if got, err := c.roundTrip("slow", 5*time.Second); err != nil || got != "slow" {
		t.Fatalf("expected the echo, got %q %v", got, err)
	}
	// Both directions are delayed: the echo needs two delays at least.
	// (A lower bound of the delay the link itself adds, not a timing of the
	// machine.)
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Errorf("expected at least 400ms through a link delaying 200ms each way, got %v", d)
	}
}

func TestNetSelectors(t *testing.T) {
	n := New()
	t.Cleanup(n.Close)
	target := echoServer(t)
	for _, p := range [][2]string{{"1", "2"}, {"2", "1"}, {"1", "3"}, {"3", "1"}, {"2", "3"}, {"3", "2"}} {
		if _, err := n.Link(p[0], p[1], target); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.Link("1", "2", target); err == nil {
		t.Error("expected a second link 1→2 to be refused")
	}
	if got := len(n.Links("1")); got != 4 {
		t.Errorf("expected 4 links touching 1, got %d", got)
	}
	if got := len(n.Between("2", "3")); got != 2 {
		t.Errorf("expected 2 links between 2 and 3, got %d", got)
	}
	n.Isolate("1", Hold)
	for _, l := range n.Links() {
		want := Pass
		if l.From == "1" || l.To == "1" {
			want = Hold
		}
		if l.Mode() != want {
			t.Errorf("expected %s→%s %v, got %v", l.From, l.To, want, l.Mode())
		}
	}
	n.Heal()
	for _, l := range n.Links() {
		if l.Mode() != Pass {
			t.Errorf("expected %s→%s to pass after Heal, got %v", l.From, l.To, l.Mode())
		}
	}
}
