package craftstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/craftdns/craftdns/plugin/craftstore/replica"
)

// Members of a Kubernetes StatefulSet (deploy/kubernetes) take their id
// from the pod's ordinal (id ordinal) and join the group by themselves
// (join URL...). A scale-down stops the pods of the highest ordinals, and
// a stopping pod cannot tell that from a restart by itself: with
// `statefulset NAME`, a member that stops asks the Kubernetes API for the
// StatefulSet's replicas, and when they no longer include its ordinal it
// leaves the majority: it demotes itself to a learner, so that the group's
// quorum counts the members that run. It keeps its id and its data (the
// PersistentVolumeClaim stays): scaled up again, the pod comes back, catches
// up and is promoted (promote). A member that cannot reach the API stays a
// voter and says so.

// serviceAccountDir is where Kubernetes mounts a pod's service account:
// token, ca.crt, namespace.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// statefulSet is the StatefulSet a member's pod belongs to.
type statefulSet struct {
	name    string
	account string // the service account's directory
}

// replicas reads the StatefulSet's spec.replicas from the Kubernetes API
// the pod's environment names (KUBERNETES_SERVICE_HOST and _PORT), with
// the pod's service account (it needs get on statefulsets).
func (s *statefulSet) replicas(ctx context.Context) (int64, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return 0, errors.New("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set: not in a Kubernetes pod")
	}
	token, err := os.ReadFile(filepath.Join(s.account, "token"))
	if err != nil {
		return 0, err
	}
	ns, err := os.ReadFile(filepath.Join(s.account, "namespace"))
	if err != nil {
		return 0, err
	}
	ca, err := os.ReadFile(filepath.Join(s.account, "ca.crt"))
	if err != nil {
		return 0, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return 0, fmt.Errorf("%s: no certificate", filepath.Join(s.account, "ca.crt"))
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	u := fmt.Sprintf("https://%s/apis/apps/v1/namespaces/%s/statefulsets/%s", net.JoinHostPort(host, port), strings.TrimSpace(string(ns)), s.name)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s: %s", u, resp.Status, strings.TrimSpace(string(body)))
	}
	var sts struct {
		Spec struct {
			Replicas *int64 `json:"replicas"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(body, &sts); err != nil {
		return 0, fmt.Errorf("GET %s: %w", u, err)
	}
	if sts.Spec.Replicas == nil {
		return 1, nil // the API's default
	}
	return *sts.Spec.Replicas, nil
}

// leaveTimeout bounds what a stopping member spends leaving the majority.
const leaveTimeout = 10 * time.Second

// leaveIfScaledDown demotes the member to a learner when its StatefulSet
// no longer counts its ordinal (statefulSet). It runs after the hand-off:
// a leader is not demoted (it would lead without a vote until the next
// election).
func (m *member) leaveIfScaledDown() {
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	id := m.rep.ID()
	n, err := m.cfg.stateful.replicas(ctx)
	if err != nil {
		log.Warningf("member %d cannot tell whether StatefulSet %s was scaled down: %v; it stays a voter", id, m.cfg.stateful.name, err)
		return
	}
	if int64(id)-1 < n { // id ordinal: the ordinal is id-1
		return // a restart
	}
	for ctx.Err() == nil {
		if m.rep.IsLeader() {
			log.Warningf("member %d leads still: it stays a voter though StatefulSet %s has %d replicas", id, m.cfg.stateful.name, n)
			return
		}
		if self, _ := m.self(); self != nil && self.Learner {
			log.Infof("member %d left the majority: StatefulSet %s has %d replicas (scaled down); it is a learner until its pod comes back", id, m.cfg.stateful.name, n)
			return
		}
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		err := m.rep.AddMember(actx, replica.Member{ID: id, Learner: true})
		acancel()
		if err == nil {
			continue // the next round sees it a learner
		}
		if errors.Is(err, replica.ErrConflict) {
			log.Warningf("member %d stays a voter: %v", id, err)
			return
		}
		log.Warningf("member %d leaving the majority: %v (will retry)", id, err)
	}
	log.Warningf("member %d could not leave the majority in %v: it stays a voter; demote it with POST /v1/cluster/members {\"id\":%d,\"learner\":true}", id, leaveTimeout, id)
}

// self returns this member's record in the group as it knows it, nil
// when it is not (or no longer) a member.
func (m *member) self() (*replica.Member, error) {
	st, err := m.rep.Status()
	if err != nil {
		return nil, err
	}
	for i := range st.Members {
		if st.Members[i].ID == m.rep.ID() {
			return &st.Members[i], nil
		}
	}
	return nil, nil
}

// promote asks the group to make this member a voter again; it reports
// whether there is nothing left to do (a voter already, or not a member).
func (m *member) promote() bool {
	id := m.rep.ID()
	self, err := m.self()
	if err != nil {
		return false
	}
	if self == nil || !self.Learner {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.timeout)
	defer cancel()
	switch err := m.rep.AddMember(ctx, replica.Member{ID: id}); {
	case err == nil:
		log.Infof("member %d caught up and votes again", id)
		return true
	case errors.Is(err, replica.ErrConflict):
		return true
	default:
		log.Warningf("member %d asking to vote: %v (will retry)", id, err)
		return false
	}
}
