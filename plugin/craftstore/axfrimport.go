package craftstore

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/craftdns/craftdns/internal/zoneapi"
	"github.com/craftdns/craftdns/plugin/craftstore/replica"

	"github.com/miekg/dns"
)

// Operators moving off BIND or Knot import a zone from its primary by AXFR
// (RFC 5936): through the API (POST /v1/zones/{zone}/axfr) or with
// `seed ZONE axfr ADDRESS` when the data directory is new. The records go
// into an import as they arrive (replica.Import: one chunk in memory, not
// the zone), are checked like a zone file's and replace the zone as PUT
// does.

// Timeouts of a transfer from a primary: to connect, and per message (a
// whole transfer takes as long as its zone needs: the API's request or
// the seed is cut only when the primary stalls).
const (
	axfrDialTimeout = 5 * time.Second
	axfrReadTimeout = 30 * time.Second
)

// tsigKey signs a transfer request (RFC 8945).
type tsigKey struct {
	name, secret, algorithm string
}

// axfrRequest is the body of POST /v1/zones/{zone}/axfr.
type axfrRequest struct {
	Primary   string `json:"primary"`
	Key       string `json:"key,omitempty"`
	Secret    string `json:"secret,omitempty"`
	Algorithm string `json:"algorithm,omitempty"`
}

// tsigAlgorithms are the TSIG algorithms a transfer request may use.
var tsigAlgorithms = map[string]bool{
	dns.HmacSHA1: true, dns.HmacSHA224: true, dns.HmacSHA256: true,
	dns.HmacSHA384: true, dns.HmacSHA512: true,
}

// key returns the TSIG key the request names, or nil.
func (req axfrRequest) key() (*tsigKey, error) {
	if req.Key == "" && req.Secret == "" && req.Algorithm == "" {
		return nil, nil
	}
	if req.Key == "" || req.Secret == "" {
		return nil, errors.New("a TSIG key needs both key and secret")
	}
	if _, ok := dns.IsDomainName(req.Key); !ok {
		return nil, fmt.Errorf("key %q is not a domain name", req.Key)
	}
	if _, err := base64.StdEncoding.DecodeString(req.Secret); err != nil {
		return nil, fmt.Errorf("secret is not base64: %v", err)
	}
	alg := dns.HmacSHA256
	if req.Algorithm != "" {
		alg = dns.Fqdn(strings.ToLower(req.Algorithm))
	}
	if !tsigAlgorithms[alg] {
		return nil, fmt.Errorf("unsupported TSIG algorithm %q", req.Algorithm)
	}
	return &tsigKey{name: dns.CanonicalName(req.Key), secret: req.Secret, algorithm: alg}, nil
}

// primaryAddr checks a primary's address and adds port 53 when it has none.
func primaryAddr(s string) (string, error) {
	if s == "" {
		return "", errors.New("primary address missing")
	}
	if _, _, err := net.SplitHostPort(s); err == nil {
		return s, nil
	}
	host := strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	if strings.ContainsAny(host, "[]/ ") {
		return "", fmt.Errorf("primary %q is not host or host:port", s)
	}
	return net.JoinHostPort(host, "53"), nil
}

// axfrZone is POST /v1/zones/{zone}/axfr: transfer the zone from a primary
// and create or replace it, answering like PUT.
func (a *apiServer) axfrZone(w http.ResponseWriter, r *http.Request) {
	origin, err := zoneapi.ZoneParam(r)
	if err == nil {
		err = a.admit(origin)
	}
	if err != nil {
		fail(w, err)
		return
	}
	var req axfrRequest
	if err := decodeBody(w, r, &req); err != nil {
		fail(w, err)
		return
	}
	primary, err := primaryAddr(req.Primary)
	if err != nil {
		fail(w, badRequest("%v", err))
		return
	}
	key, err := req.key()
	if err != nil {
		fail(w, badRequest("%v", err))
		return
	}
	im := a.rep.NewImport(origin, false, a.timeout)
	defer im.Abort()
	if err := axfrIn(r.Context(), origin, primary, key, a.maxZone, im); err != nil {
		fail(w, err)
		return
	}
	if res, ok := a.commitImport(w, r, im, origin); ok {
		log.Infof("imported zone %s by AXFR from %s: %d records, serial %d", origin, primary, res.Records, res.Serial)
	}
}

// axfrIn transfers origin from primary by AXFR, TSIG-signed with key unless
// nil, into import im, all its records but the closing SOA, as they
// arrive. Errors are *replica.Error: ErrUpstream when the transfer fails,
// ErrInvalid when the zone is not acceptable (im's checks), the import's
// own when it cannot write; zoneapi.TooManyRecords when the zone holds more
// than max records (0: no limit), counted as they arrive: the transfer is
// cut there.
func axfrIn(ctx context.Context, origin, primary string, key *tsigKey, max int, im *replica.Import) error {
	bad := func(kind error, format string, a ...any) error {
		return replica.Errorf(kind, "AXFR of %s from %s: %s", origin, primary, fmt.Sprintf(format, a...))
	}
	d := net.Dialer{Timeout: axfrDialTimeout}
	nc, err := d.DialContext(ctx, "tcp", primary)
	if err != nil {
		return bad(replica.ErrUpstream, "%v", err)
	}
	// Closing the connection ends the transfer (when the request goes away,
	// the zone is too large or the import fails); the channel then closes
	// with an error.
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	tr := &dns.Transfer{Conn: &dns.Conn{Conn: nc}, ReadTimeout: axfrReadTimeout, WriteTimeout: axfrDialTimeout}
	m := new(dns.Msg)
	m.SetAxfr(origin)
	if key != nil {
		tr.TsigSecret = map[string]string{key.name: key.secret}
		m.SetTsig(key.name, key.algorithm, 300, time.Now().Unix())
	}
	env, err := tr.In(m, primary)
	if err != nil {
		nc.Close()
		return bad(replica.ErrUpstream, "%v", err)
	}
	// The last record is held back: the transfer ends with the SOA it
	// began with (RFC 5936 section 2.2), which is not the zone's.
	var last dns.RR
	n := 0
	var ferr error
	for e := range env {
		if ferr != nil {
			continue // draining after an error
		}
		if e.Error != nil {
			ferr = bad(replica.ErrUpstream, "%v", e.Error)
			continue
		}
		for _, rr := range e.RR {
			if last != nil {
				if max > 0 && n >= max {
					ferr = zoneapi.TooManyRecords(origin, max)
				} else {
					ferr = im.Add(ctx, last)
				}
				n++
				if ferr != nil {
					nc.Close()
					break
				}
			}
			last = rr
		}
	}
	if ferr != nil {
		return ferr
	}
	if err := ctx.Err(); err != nil {
		return bad(replica.ErrUpstream, "%v", err)
	}
	if n < 1 || last == nil || last.Header().Rrtype != dns.TypeSOA {
		return bad(replica.ErrUpstream, "incomplete transfer")
	}
	return nil
}

// seedSource is where a `seed` line takes its zone from: a zone file, or a
// primary server by AXFR (`seed ZONE axfr ADDRESS`).
type seedSource struct {
	file    string
	primary string
}

func (s seedSource) String() string {
	if s.primary != "" {
		return "AXFR from " + s.primary
	}
	return s.file
}

// feed reads the zone into import im. Failing to reach a primary is worth
// a retry (retry).
func (s seedSource) feed(ctx context.Context, origin string, max int, im *replica.Import) (retry bool, err error) {
	if s.primary != "" {
		err = axfrIn(ctx, origin, s.primary, nil, max, im)
		return errors.Is(err, replica.ErrUpstream), err
	}
	f, err := os.Open(s.file)
	if err != nil {
		return false, err
	}
	defer f.Close()
	return false, zoneapi.StreamZone(origin, bufio.NewReaderSize(f, 1<<16), max, func(rr dns.RR) error { return im.Add(ctx, rr) })
}
