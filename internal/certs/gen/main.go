// Command gen writes a CA and member certificates for craftstore's raft_tls:
//
//	go run ./internal/certs/gen -dir Corefile.examples/tls/certs -members 3
//
// writes ca.pem, its key ca-key.pem (keep it apart from the members) and, for each member i, member<i>.pem and member<i>-key.pem.
//
//	go run ./internal/certs/gen -dir Corefile.examples/tls/certs -issue router
//
// issues one more certificate, router.pem and router-key.pem, from the CA
// already in the directory (the TLS example's router's, with which the
// members' DNS over TLS knows it).
// It is how the TLS example's certificates were made; for a deployment,
// make them with the tools you already use (openssl, cfssl, cert-manager):
// any certificate from the group's CA works, for both server and client use.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/craftdns/craftdns/internal/certs"
)

func main() {
	dir := flag.String("dir", ".", "directory to write to")
	members := flag.Int("members", 3, "member certificates to issue")
	years := flag.Int("years", 100, "validity in years")
	name := flag.String("name", "craftdns example group CA", "the CA's common name")
	issue := flag.String("issue", "", "issue only this certificate, from the CA in -dir (ca.pem, ca-key.pem)")
	flag.Parse()
	var err error
	if *issue != "" {
		err = issueOne(*dir, *issue, *years)
	} else {
		err = run(*dir, *name, *members, *years)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(dir, name string, members, years int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ca, err := certs.NewAuthority(name, time.Now().AddDate(years, 0, 0))
	if err != nil {
		return err
	}
	if _, err := ca.WriteCA(dir, "ca"); err != nil {
		return err
	}
	if err := ca.WriteKey(dir, "ca"); err != nil {
		return err
	}
	for i := 1; i <= members; i++ {
		if _, _, err := ca.WriteMember(dir, fmt.Sprintf("member%d", i), years); err != nil {
			return err
		}
	}
	return nil
}

func issueOne(dir, name string, years int) error {
	ca, err := certs.LoadAuthority(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		return err
	}
	_, _, err = ca.WriteMember(dir, name, years)
	return err
}
