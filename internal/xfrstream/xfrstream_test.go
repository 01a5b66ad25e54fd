package xfrstream

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/miekg/dns"
)

func TestRoundTrip(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b)
	a, _ := dns.NewRR("www.example.org. 60 IN A 192.0.2.1")
	txt, _ := dns.NewRR(`www.example.org. 60 IN TXT "x"`)
	if err := w.Write([]dns.RR{a, txt}); err != nil {
		t.Fatal(err)
	}
	if err := w.Write([]dns.RR{a}); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	whole := append([]byte(nil), b.Bytes()...)
	w.End()

	r := NewReader(bytes.NewReader(b.Bytes()))
	var got []dns.RR
	for {
		rrs, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, rrs...)
	}
	if len(got) != 3 || got[1].String() != txt.String() {
		t.Errorf("expected the 3 records written, got %v", got)
	}

	// Without the end frame the stream is short, also when cut inside a
	// frame.
	for _, cut := range [][]byte{whole[:len(whole)-3], whole} {
		r := NewReader(bytes.NewReader(cut))
		var err error
		for err == nil {
			_, err = r.Next()
		}
		if !errors.Is(err, ErrShort) {
			t.Errorf("a stream of %d bytes without its end: expected ErrShort, got %v", len(cut), err)
		}
	}
}
