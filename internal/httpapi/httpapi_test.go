package httpapi

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestAuth(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { WriteJSON(w, 200, map[string]int{"n": 1}) })
	for _, tc := range []struct {
		token, header string
		want          int
	}{
		{"", "", 200},
		{"s3cret", "Bearer s3cret", 200},
		{"s3cret", "", 401},
		{"s3cret", "Bearer wrong", 401},
		{"s3cret", "s3cret", 401},
	} {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/v1/zones", nil)
		if tc.header != "" {
			r.Header.Set("Authorization", tc.header)
		}
		Auth("test", tc.token, ok).ServeHTTP(rec, r)
		if rec.Code != tc.want {
			t.Errorf("token %q, header %q: expected %d, got %d", tc.token, tc.header, tc.want, rec.Code)
		}
		if rec.Code == 401 && (rec.Header().Get("WWW-Authenticate") == "" || rec.Header().Get("Content-Type") != "application/json") {
			t.Errorf("401 without a challenge or JSON: %v", rec.Header())
		}
	}
}

func TestLoopback(t *testing.T) {
	for host, want := range map[string]bool{"127.0.0.1": true, "::1": true, "localhost": true, "127.9.9.9": true, "0.0.0.0": false, "192.0.2.1": false, "example.org": false} {
		if got := Loopback(host); got != want {
			t.Errorf("%s: expected %v, got %v", host, want, got)
		}
	}
}

// TestCleanPaths: paths that net/http's ServeMux would redirect get a JSON
// 400 instead; clean ones, zone names with their trailing dot included,
// reach the handler.
func TestCleanPaths(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/zones/{zone}", func(w http.ResponseWriter, r *http.Request) { WriteJSON(w, 200, r.PathValue("zone")) })
	mux.HandleFunc("GET /v1/cluster", func(w http.ResponseWriter, r *http.Request) { WriteJSON(w, 200, "cluster") })
	srv := httptest.NewServer(CleanPaths(mux))
	defer srv.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		path string
		want int
	}{
		{"/v1/zones/example.org.", 200},
		{"/v1/cluster", 200},
		{"/v1/zones/../cluster", 400},
		{"/v1/zones/%2e%2e/cluster", 400},
		{"/v1//cluster", 400},
		{"/v1/cluster/", 400},
		{"/v1/./cluster", 400},
	} {
		resp, err := client.Get(srv.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want || (tc.want == 400 && resp.Header.Get("Content-Type") != "application/json") {
			t.Errorf("%s: expected %d (JSON), got %d %s", tc.path, tc.want, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
}

// TestHosts: an API without a token takes requests by IP address,
// localhost and its own host name only (DNS rebinding); with a token, any.
func TestHosts(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { WriteJSON(w, 200, "ok") })
	for _, tc := range []struct {
		addr, token, host string
		want              int
	}{
		{"127.0.0.1:8053", "", "127.0.0.1:8053", 200},
		{"127.0.0.1:8053", "", "[::1]:8053", 200},
		{"127.0.0.1:8053", "", "localhost:8053", 200},
		{"127.0.0.1:8053", "", "LocalHost", 200},
		{"127.0.0.1:8053", "", "192.0.2.1", 200},
		{"127.0.0.1:8053", "", "attacker.example:8053", 421},
		{"127.0.0.1:8053", "", "attacker.example.", 421},
		{"127.0.0.1:8053", "", "localhost.attacker.example", 421},
		{"127.0.0.1:8053", "", "", 421},
		{"api.internal:8053", "", "api.internal:8053", 200},
		{"api.internal:8053", "", "other.internal:8053", 421},
		{"0.0.0.0:8053", "s3cret", "craftdns-a-0.craftdns-a:8053", 200},
	} {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/v1/zones", nil)
		r.Host = tc.host
		Hosts(tc.addr, tc.token, ok).ServeHTTP(rec, r)
		if rec.Code != tc.want {
			t.Errorf("api %s, token %q, Host %q: expected %d, got %d", tc.addr, tc.token, tc.host, tc.want, rec.Code)
		}
		if rec.Code == 421 && rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("421 without JSON: %v", rec.Header())
		}
	}
}

// TestServerLimits: every API server has its time limits and its listener
// a bound on connections.
func TestServerLimits(t *testing.T) {
	srv := Server("127.0.0.1:0", "", http.NotFoundHandler())
	if srv.ReadHeaderTimeout == 0 || srv.ReadTimeout == 0 || srv.WriteTimeout == 0 || srv.IdleTimeout == 0 {
		t.Errorf("a time limit is missing: %+v", srv)
	}
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, MaxConns+1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	for range MaxConns + 1 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	var held []net.Conn
	for range MaxConns {
		select {
		case c := <-accepted:
			held = append(held, c)
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d connections accepted", len(held), MaxConns)
		}
	}
	select {
	case <-accepted:
		t.Fatalf("connection %d accepted while %d were open", MaxConns+1, MaxConns)
	case <-time.After(200 * time.Millisecond):
	}
	held[0].Close() // a slot frees: the last one is taken
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("a freed slot was not taken")
	}
	for _, c := range held {
		c.Close()
	}
}
