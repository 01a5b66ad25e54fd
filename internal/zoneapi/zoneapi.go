// Package zoneapi is the contract of the zone and record paths of the HTTP
// API, which craftstore serves for its member and craftroute serves over
// the shards (docs/design.md, "HTTP API"): the path parameters, the bodies
// and their limits, zone and record texts, the JSON types and the errors
// that refuse a request. Both plugins parse a request the same way, so an
// operator gets the same answer from a member and from a router.
package zoneapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/craftdns/craftdns/internal/httpapi"
	"github.com/craftdns/craftdns/internal/policy"
	"github.com/craftdns/craftdns/internal/zonerules"

	"github.com/miekg/dns"
)

// Limits and defaults.
const (
	MaxZoneBody    = 256 << 20 // a zone file (PUT /v1/zones/{zone})
	MaxRecordsBody = 4 << 20   // a record change, or another JSON body
	// DefaultMaxZoneRecords bounds the records of a zone an import makes
	// (max_zone_records), $GENERATE expansions counted.
	DefaultMaxZoneRecords = 1_000_000
	// DefaultMaxChangeRecords bounds the records one API change adds and
	// deletes together (max_change_records).
	DefaultMaxChangeRecords = 10_000
	// DefaultTTL is the TTL of records written without one (RFC 1035 master
	// files take it from $TTL; the API's record texts may omit it).
	DefaultTTL = 3600
)

// ZoneInfo is a zone as GET /v1/zones lists it, and the reply of PUT.
type ZoneInfo struct {
	Zone    string `json:"zone"`
	Serial  uint32 `json:"serial"`
	Records int    `json:"records"`
}

// Change is the body of POST /v1/zones/{zone}/records: records to add
// (zone file lines) and deletions ("RR text", {"name","type"} or {"name"}),
// applied as one change, deletions first.
type Change struct {
	Add    []string          `json:"add,omitempty"`
	Delete []json.RawMessage `json:"delete,omitempty"`
}

// Changed is the reply to a change: the zone's serial after it.
type Changed struct {
	Zone   string `json:"zone"`
	Serial uint32 `json:"serial"`
}

// Handlers serve the zone and record paths of the contract.
type Handlers struct {
	ListZones, PutZone, GetZone, DeleteZone, ChangeRecords, GetRecords http.HandlerFunc
}

// Register adds the zone and record paths to mux.
func (h Handlers) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/zones", h.ListZones)
	mux.HandleFunc("PUT /v1/zones/{zone}", httpapi.Body(httpapi.Zone, h.PutZone))
	mux.HandleFunc("GET /v1/zones/{zone}", h.GetZone)
	mux.HandleFunc("DELETE /v1/zones/{zone}", h.DeleteZone)
	mux.HandleFunc("POST /v1/zones/{zone}/records", httpapi.Body(httpapi.JSON, h.ChangeRecords))
	mux.HandleFunc("GET /v1/zones/{zone}/records", h.GetRecords)
}

// Error refuses a request with an HTTP status and a message for the client.
type Error struct {
	Status int
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

// Errorf returns an Error with status.
func Errorf(status int, format string, a ...any) *Error {
	return &Error{Status: status, Msg: fmt.Sprintf(format, a...)}
}

// BadRequest returns an Error with status 400.
func BadRequest(format string, a ...any) *Error {
	return Errorf(http.StatusBadRequest, format, a...)
}

// Status returns the HTTP status and message of an error that refuses the
// request as the contract says: an *Error, or a body over its limit (413).
// ok is false for any other error, which each plugin maps itself.
func Status(err error) (status int, msg string, ok bool) {
	var zerr *Error
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &zerr):
		return zerr.Status, zerr.Msg, true
	case errors.As(err, &tooBig):
		return http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", tooBig.Limit), true
	}
	return 0, "", false
}

// ZoneParam returns the canonical origin named in the request's path.
func ZoneParam(r *http.Request) (string, error) {
	z := r.PathValue("zone")
	if _, ok := dns.IsDomainName(z); !ok || z == "" {
		return "", BadRequest("%q is not a domain name", z)
	}
	return dns.CanonicalName(z), nil
}

// ReadZone reads a PUT /v1/zones/{zone} request: the canonical origin and
// the zone file text, at most MaxZoneBody bytes.
func ReadZone(w http.ResponseWriter, r *http.Request) (origin string, text []byte, err error) {
	if origin, err = ZoneParam(r); err != nil {
		return "", nil, err
	}
	if text, err = io.ReadAll(http.MaxBytesReader(w, r.Body, MaxZoneBody)); err != nil {
		return "", nil, err
	}
	return origin, text, nil
}

// Records is the reply of GET /v1/zones/{zone}/records.
type Records struct {
	Zone    string   `json:"zone"`
	Name    string   `json:"name"`
	Records []string `json:"records"`
}

// RecordsQuery reads the query of GET /v1/zones/{zone}/records for zone
// origin: the name (required, made absolute) and the type (0: every type).
func RecordsQuery(r *http.Request, origin string) (name string, qtype uint16, err error) {
	q := r.URL.Query()
	if name = q.Get("name"); name == "" {
		return "", 0, BadRequest("the name parameter is required")
	}
	if name, err = AbsName(origin, name); err != nil {
		return "", 0, err
	}
	if t := q.Get("type"); t != "" {
		var ok bool
		if qtype, ok = ParseType(t); !ok {
			return "", 0, BadRequest("unknown type %q", t)
		}
	}
	return name, qtype, nil
}

// AbsName makes an API name absolute and canonical: "@" is the origin, a
// name inside the zone stays as it is (with or without the final dot), and
// any other name without a final dot is relative to the origin.
func AbsName(origin, name string) (string, error) {
	if _, ok := dns.IsDomainName(name); !ok {
		return "", BadRequest("%q is not a domain name", name)
	}
	n := dns.CanonicalName(name)
	if !dns.IsSubDomain(origin, n) && !strings.HasSuffix(name, ".") && name != "@" {
		n = dns.CanonicalName(name + "." + origin)
	}
	if name == "@" {
		n = origin
	}
	if !dns.IsSubDomain(origin, n) {
		return "", BadRequest("name %q is outside zone %q", name, origin)
	}
	return n, nil
}

// Decode decodes a JSON body into v, refusing unknown fields: a 400 Error
// for a bad body; an *http.MaxBytesError passes through (413).
func Decode(body io.Reader, v any) error {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return err
		}
		return BadRequest("body: %v", err)
	}
	return nil
}

// ReadChange decodes a Change, refusing one with nothing to do.
func ReadChange(body io.Reader) (Change, error) {
	var c Change
	if err := Decode(body, &c); err != nil {
		return Change{}, err
	}
	if len(c.Add) == 0 && len(c.Delete) == 0 {
		return Change{}, BadRequest("nothing to add or delete")
	}
	return c, nil
}

// CheckChangeSize refuses, with 413, a change whose additions and
// deletions number more than max (max_change_records); 0: no limit.
func CheckChangeSize(c Change, max int) error {
	if n := len(c.Add) + len(c.Delete); max > 0 && n > max {
		return Errorf(http.StatusRequestEntityTooLarge, "%d records in one change, at most %d (max_change_records): nothing was written", n, max)
	}
	return nil
}

// CheckGrowth refuses, with 413, a change that adds adds records to a zone
// of records records when that makes more than max (max_zone_records; 0:
// no limit). Additions are counted as new records, so a zone at its limit
// takes a change that deletes first and adds in a second one.
func CheckGrowth(origin string, records, adds, max int) error {
	if max > 0 && adds > 0 && records+adds > max {
		return Errorf(http.StatusRequestEntityTooLarge, "zone %q holds %d records and the change adds %d: more than %d (max_zone_records): nothing was written", origin, records, adds, max)
	}
	return nil
}

// ParseRecord parses one record of a record change in zone file syntax,
// relative to origin, and checks that the zone can hold it (zonerules.CheckRecord)
// and that a change may touch it (zonerules.SignedType).
func ParseRecord(origin, text string) (dns.RR, error) {
	zp := dns.NewZoneParser(strings.NewReader(text), origin, "")
	zp.SetIncludeAllowed(false)
	zp.SetDefaultTTL(DefaultTTL)
	rr, ok := zp.Next()
	if err := zp.Err(); err != nil {
		return nil, err
	}
	if !ok {
		return nil, errors.New("empty record")
	}
	if _, more := zp.Next(); more {
		return nil, fmt.Errorf("%q holds more than one record", text)
	}
	if zonerules.SignedType(rr.Header().Rrtype) {
		return nil, zonerules.RefuseSigned(rr.Header().Rrtype)
	}
	return rr, zonerules.CheckRecord(origin, rr)
}

// Deletion is one entry of Change.Delete: a record (RR set), or a name
// and, unless Type is 0, a type.
type Deletion struct {
	RR   dns.RR
	Name string // canonical
	Type uint16
}

// ParseDeletion reads "RR text", {"name","type"} or {"name"}.
func ParseDeletion(origin string, raw json.RawMessage) (Deletion, error) {
	var text string
	if json.Unmarshal(raw, &text) == nil {
		rr, err := ParseRecord(origin, text)
		return Deletion{RR: rr}, err
	}
	var sel struct {
		Name string `json:"name"`
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &sel); err != nil || sel.Name == "" {
		return Deletion{}, errors.New(`want "RR text", {"name","type"} or {"name"}`)
	}
	name, err := AbsName(origin, sel.Name)
	if err != nil {
		return Deletion{}, err
	}
	d := Deletion{Name: name}
	if sel.Type != "" {
		t, ok := ParseType(sel.Type)
		if !ok {
			return Deletion{}, fmt.Errorf("unknown type %q", sel.Type)
		}
		if zonerules.SignedType(t) {
			return Deletion{}, zonerules.RefuseSigned(t)
		}
		d.Type = t
	}
	return d, nil
}

// ParseType reads a type's mnemonic or its generic name (TYPE65380, RFC
// 3597 section 5), in any case.
func ParseType(s string) (uint16, bool) {
	s = strings.ToUpper(s)
	if t, ok := dns.StringToType[s]; ok {
		return t, true
	}
	if n, ok := strings.CutPrefix(s, "TYPE"); ok {
		t, err := strconv.ParseUint(n, 10, 16)
		return uint16(t), err == nil && t != 0
	}
	return 0, false
}

// RefuseReserved refuses a client's record change that adds or deletes
// records of the types that hold request-routing policies (policy.Reserved):
// they are written through the policy API, which checks them. A deletion
// of a whole name takes them along.
func RefuseReserved(add []dns.RR, del []Deletion) error {
	for i, rr := range add {
		if t := rr.Header().Rrtype; policy.Reserved(t) {
			return BadRequest("add[%d]: %v", i, policy.RefuseReserved(t))
		}
	}
	for i, d := range del {
		t := d.Type
		if d.RR != nil {
			t = d.RR.Header().Rrtype
		}
		if policy.Reserved(t) {
			return BadRequest("delete[%d]: %v", i, policy.RefuseReserved(t))
		}
	}
	return nil
}

// ParseZone parses zone file text for origin and checks it (zonerules.CheckZone).
func ParseZone(origin, text string) ([]dns.RR, error) { return ParseZoneMax(origin, text, 0) }

// ParseZoneMax is ParseZone for a zone of at most max records (0: no
// limit), counted as they are parsed, $GENERATE expansions included: a few
// bytes of $GENERATE lines make no more records than max before the import
// is refused (413, TooManyRecords).
func ParseZoneMax(origin, text string, max int) ([]dns.RR, error) {
	var rrs []dns.RR
	err := StreamZoneText(origin, text, max, func(rr dns.RR) error {
		rrs = append(rrs, rr)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := zonerules.CheckZone(origin, rrs); err != nil {
		return nil, err
	}
	return rrs, nil
}

// StreamZoneText parses zone file text for origin and calls fn with each
// record in turn, as ParseZoneMax counts them; it stops at fn's first
// error and returns it. The zone is not checked: fn's caller checks it
// (craftstore's imports, chunk by chunk).
func StreamZoneText(origin, text string, max int, fn func(dns.RR) error) error {
	if max > 0 && generated(text) > max {
		// Refused before one record is made: a few lines of $GENERATE
		// would otherwise build max records first.
		return TooManyRecords(origin, max)
	}
	return StreamZone(origin, strings.NewReader(text), max, fn)
}

// StreamZone is StreamZoneText for zone file text read from r (a file of
// any size: memory holds one record at a time), without the check of the
// $GENERATE lines before the first record: their records are counted as
// they are made.
func StreamZone(origin string, r io.Reader, max int, fn func(dns.RR) error) error {
	zp := dns.NewZoneParser(r, origin, "")
	zp.SetIncludeAllowed(false)
	zp.SetDefaultTTL(DefaultTTL)
	n := 0
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		if max > 0 && n >= max {
			return TooManyRecords(origin, max)
		}
		n++
		if err := fn(rr); err != nil {
			return err
		}
	}
	return zp.Err()
}

// generated returns how many records the $GENERATE lines of zone file
// text make (RFC-less, BIND's syntax as miekg/dns reads it: "$GENERATE
// start-stop[/step] ..."), without making them; a range it cannot read
// counts nothing (the parser then says what is wrong with it).
func generated(text string) int {
	n := 0
	for rest := text; rest != ""; {
		line := rest
		if i := strings.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			rest = ""
		}
		f := strings.Fields(line)
		if len(f) < 2 || !strings.EqualFold(f[0], "$GENERATE") {
			continue
		}
		rng, step, _ := strings.Cut(f[1], "/")
		from, to, ok := strings.Cut(rng, "-")
		start, err1 := strconv.Atoi(from)
		stop, err2 := strconv.Atoi(to)
		by := 1
		if step != "" {
			by, _ = strconv.Atoi(step)
		}
		if !ok || err1 != nil || err2 != nil || by <= 0 || stop < start {
			continue
		}
		n += (stop-start)/by + 1
		if n < 0 || n > 1<<40 {
			return 1 << 40
		}
	}
	return n
}

// TooManyRecords refuses an import of zone origin that holds more than max
// records (413).
func TooManyRecords(origin string, max int) *Error {
	return Errorf(http.StatusRequestEntityTooLarge, "zone %q holds more than %d records ($GENERATE expansions counted; max_zone_records): nothing was written", origin, max)
}
