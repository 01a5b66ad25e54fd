package craftstore

import (
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
	"github.com/craftdns/craftdns/internal/zonerules"
	"github.com/craftdns/craftdns/plugin/craftstore/replica"

	"github.com/miekg/dns"
)

// Operators moving off BIND or Knot import a zone from its primary by AXFR
// (RFC 5936): through the API (POST /v1/zones/{zone}/axfr) or with
// `seed ZONE axfr ADDRESS` when the data directory is new. The records are
// checked like a zone file (zonerules.CheckZone) and replace the zone as PUT does.

// Timeouts of a transfer from a primary: to connect, per message, and for
// a whole transfer that seeds a zone.
const (
	axfrDialTimeout = 5 * time.Second
	axfrReadTimeout = 30 * time.Second
	axfrSeedTimeout = 10 * time.Minute
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
	rrs, err := axfrIn(r.Context(), origin, primary, key, a.maxZone)
	if err != nil {
		fail(w, err)
		return
	}
	if res, ok := a.importZone(w, r, origin, rrs); ok {
		log.Infof("imported zone %s by AXFR from %s: %d records, serial %d", origin, primary, res.Records, res.Serial)
	}
}

// axfrIn transfers origin from primary by AXFR, TSIG-signed with key unless
// nil, and returns its records without the closing SOA, checked like a zone
// file. Errors are *replica.Error: ErrUpstream when the transfer fails,
// ErrInvalid when the zone is not acceptable, ErrTooLarge when it is larger
// than a zone file may be; zoneapi.TooManyRecords when it holds more than
// max records (0: no limit), counted as they arrive: the transfer is cut
// there, so memory never holds more.
func axfrIn(ctx context.Context, origin, primary string, key *tsigKey, max int) ([]dns.RR, error) {
	bad := func(kind error, format string, a ...any) error {
		return replica.Errorf(kind, "AXFR of %s from %s: %s", origin, primary, fmt.Sprintf(format, a...))
	}
	d := net.Dialer{Timeout: axfrDialTimeout}
	nc, err := d.DialContext(ctx, "tcp", primary)
	if err != nil {
		return nil, bad(replica.ErrUpstream, "%v", err)
	}
	// Closing the connection ends the transfer (when the request goes away
	// or the zone is too large); the channel then closes with an error.
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
		return nil, bad(replica.ErrUpstream, "%v", err)
	}
	var rrs []dns.RR
	size := 0
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
			size += dns.Len(rr)
			rrs = append(rrs, rr)
		}
		if max > 0 && len(rrs) > max+1 { // the closing SOA is not the zone's
			ferr = zoneapi.TooManyRecords(origin, max)
			rrs = nil
			nc.Close()
			continue
		}
		if size > zoneapi.MaxZoneBody {
			ferr = bad(replica.ErrTooLarge, "zone over %d bytes", zoneapi.MaxZoneBody)
			nc.Close()
		}
	}
	if ferr != nil {
		return nil, ferr
	}
	if err := ctx.Err(); err != nil {
		return nil, bad(replica.ErrUpstream, "%v", err)
	}
	// The transfer ends with the SOA it began with (RFC 5936 section 2.2).
	if len(rrs) < 2 || rrs[len(rrs)-1].Header().Rrtype != dns.TypeSOA {
		return nil, bad(replica.ErrUpstream, "incomplete transfer")
	}
	rrs = rrs[:len(rrs)-1]
	if err := zonerules.CheckZone(origin, rrs); err != nil {
		return nil, bad(replica.ErrInvalid, "%v", err)
	}
	return rrs, nil
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

// load reads the zone. Failing to reach a primary is worth a retry (retry).
func (s seedSource) load(ctx context.Context, origin string, max int) (rrs []dns.RR, retry bool, err error) {
	if s.primary != "" {
		rrs, err = axfrIn(ctx, origin, s.primary, nil, max)
		retry = errors.Is(err, replica.ErrUpstream)
		return rrs, retry, err
	}
	text, err := os.ReadFile(s.file)
	if err != nil {
		return nil, false, err
	}
	rrs, err = zoneapi.ParseZoneMax(origin, string(text), max)
	return rrs, false, err
}
