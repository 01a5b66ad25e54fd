package httpapi

import (
	"net/http"
	"net/http/httptest"
	"testing"
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
