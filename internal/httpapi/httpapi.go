// Package httpapi holds what the HTTP APIs of craftstore and craftroute
// share: bearer-token authentication, JSON answers, the loopback rule, the
// Host rule and the limits of their listeners.
package httpapi

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"mime"
	"net"
	"net/http"
	"path"
	"strings"
	"time"

	"golang.org/x/net/netutil"
)

// Limits of every API listener: connections at once, and how long a
// request may take to arrive, to be answered, and a connection may idle.
// The body of a request is bounded by its handler (a zone file by
// zoneapi.MaxZoneBody, other bodies by zoneapi.MaxRecordsBody).
const (
	MaxConns          = 256
	ReadHeaderTimeout = 10 * time.Second
	ReadTimeout       = 5 * time.Minute  // a zone file of zoneapi.MaxZoneBody at 1 MB/s
	WriteTimeout      = 10 * time.Minute // a zone exported or streamed to a router
	IdleTimeout       = 2 * time.Minute
)

// Listen listens on TCP address addr, taking at most MaxConns connections
// at once (the others wait in the kernel's backlog).
func Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return netutil.LimitListener(ln, MaxConns), nil
}

// Server returns the server of an API: h behind the Host rule (Hosts),
// with the limits above.
func Server(addr, token string, h http.Handler) *http.Server {
	return &http.Server{Handler: Hosts(addr, token, h), ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout: ReadTimeout, WriteTimeout: WriteTimeout, IdleTimeout: IdleTimeout}
}

// Hosts answers 421 (Misdirected Request) with a JSON error for a request
// to an API without a token whose Host is none of its own: an IP address,
// "localhost", or the host of the API's listen address addr. A web page
// whose name an attacker makes resolve to 127.0.0.1 (DNS rebinding) then
// reaches a loopback API with that name in Host, and is refused. An API
// with a token takes any Host: a page cannot send the token, which it does
// not know, and members and routers reach each other by the names of
// their deployment (Kubernetes services).
func Hosts(addr, token string, next http.Handler) http.Handler {
	if token != "" {
		return next
	}
	own, _, _ := net.SplitHostPort(addr)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
		if net.ParseIP(host) == nil && !strings.EqualFold(host, "localhost") && (own == "" || !strings.EqualFold(host, own)) {
			WriteError(w, http.StatusMisdirectedRequest, fmt.Sprintf("Host %q is not this API's: ask it by IP address or localhost (an API without a token refuses other names, against DNS rebinding)", r.Host))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// CleanPaths answers 400 with a JSON error for a request whose path is not
// clean ("." or ".." elements, doubled or trailing slashes, "%2e%2e" too:
// the path is decoded) instead of the redirect net/http's ServeMux sends
// for it: an API client should learn that its path is wrong, not be sent
// to another one.
func CleanPaths(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.Path; p == "" || p[0] != '/' || path.Clean(p) != p {
			WriteError(w, http.StatusBadRequest, fmt.Sprintf("path %q is not clean: no \".\" or \"..\" elements, doubled or trailing slashes", p))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Media types of request bodies.
const (
	JSON = "application/json"
	Zone = "text/dns" // RFC 4027: a zone file
)

// Body answers 415 with a JSON error for a request that has a body whose
// Content-Type is not ctype (parameters such as charset aside), and passes
// the others, those without a body too, to h: a client that sends a body
// says what it is, and nothing is read of one that is something else.
func Body(ctype string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
			got := r.Header.Get("Content-Type")
			if mt, _, err := mime.ParseMediaType(got); err != nil || mt != ctype {
				if r.Method == http.MethodPatch {
					w.Header().Set("Accept-Patch", ctype)
				}
				if got == "" {
					got = "none"
				}
				WriteError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %s: this body must be %s", got, ctype))
				return
			}
		}
		h(w, r)
	}
}

// Auth requires "Authorization: Bearer token" on every request when token
// is not empty, and answers 401 with a JSON error otherwise.
func Auth(realm, token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+realm+`"`)
			WriteError(w, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// WriteJSON answers status with v as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// WriteError answers status with {"error": msg}.
func WriteError(w http.ResponseWriter, status int, msg string) {
	WriteJSON(w, status, map[string]string{"error": msg})
}

// Loopback reports whether host (a name or an IP address, no port) is
// loopback: an API listening there needs no token.
func Loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
