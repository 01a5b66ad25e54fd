package craftstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/craftdns/craftdns/internal/httpapi"
	"github.com/craftdns/craftdns/plugin/craftstore/replica"
)

// A member started with `join URL...` whose id is not among its peer lines
// adds itself to the running group before it starts: it asks the members'
// APIs at the URLs, in turn, to add it (POST /v1/cluster/members, the
// request an operator would make), then starts empty and catches up from
// the leader. One Corefile so serves every member of a StatefulSet: the
// initial members (the peer lines) start the group, a member added by
// scaling up joins it. A member whose data directory holds its state
// already is in the group: it asks nothing.

// joinWait bounds how long a joining member asks the group to add it
// before its start fails: the group may be electing a leader, or starting
// itself (pods started in parallel).
const joinWait = 60 * time.Second

// joinRetry is the pause between rounds over the URLs.
const joinRetry = time.Second

// checkJoinURL refuses a join URL that is not an http or https base URL.
func checkJoinURL(u string) error {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || (p.Path != "" && p.Path != "/") || p.RawQuery != "" {
		return fmt.Errorf("%q is not the base URL of a member's API (http://HOST:PORT)", u)
	}
	return nil
}

// joinGroup adds member self to the group through the APIs at urls unless
// dir holds a member's state already. A member the group knows already
// (409: an earlier start added it and stopped before it stored anything)
// counts as added.
func joinGroup(ctx context.Context, dir string, urls []string, token string, self replica.Member) error {
	if _, err := os.Stat(filepath.Join(dir, replica.FileName)); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	body, err := json.Marshal(self)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, joinWait)
	defer cancel()
	var errs []string
	for {
		errs = errs[:0]
		for _, u := range urls {
			err := askJoin(ctx, strings.TrimSuffix(u, "/")+"/v1/cluster/members", token, body)
			if err == nil {
				log.Infof("member %d joined the group through %s (raft %s)", self.ID, u, self.Raft)
				return nil
			}
			var refused *joinRefused
			if errors.As(err, &refused) {
				return fmt.Errorf("joining through %s: %w", u, err)
			}
			errs = append(errs, fmt.Sprintf("%s: %v", u, err))
		}
		log.Warningf("member %d could not join the group yet: %s", self.ID, strings.Join(errs, "; "))
		select {
		case <-ctx.Done():
			return fmt.Errorf("member %d could not join the group in %s: %s", self.ID, joinWait, strings.Join(errs, "; "))
		case <-time.After(joinRetry):
		}
	}
}

// joinRefused is an answer that asking again will not change: a bad
// request, a wrong token.
type joinRefused struct {
	status int
	msg    string
}

func (e *joinRefused) Error() string { return fmt.Sprintf("%d: %s", e.status, e.msg) }

// askJoin makes one request to add the member; nil when it was added or
// was a member already.
func askJoin(ctx context.Context, u, token string, body []byte) error {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", httpapi.JSON)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(msg, &e) == nil && e.Error != "" {
		msg = []byte(e.Error)
	}
	switch {
	case resp.StatusCode == http.StatusOK, resp.StatusCode == http.StatusConflict:
		return nil
	case resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusTooManyRequests:
		return &joinRefused{resp.StatusCode, strings.TrimSpace(string(msg))}
	}
	return fmt.Errorf("%d: %s", resp.StatusCode, strings.TrimSpace(string(msg)))
}
