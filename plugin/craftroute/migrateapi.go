package craftroute

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"

	"github.com/craftdns/craftdns/internal/httpapi"
	"github.com/craftdns/craftdns/internal/shardmap"
)

// The API of migrations (migrate.go): POST /v1/shards adds a shard,
// DELETE /v1/shards/{name} removes one; both answer 202 once the
// migration is in the map, and GET /v1/shards shows its progress.

// newShard is the body of POST /v1/shards.
type newShard struct {
	Name    string   `json:"name"`
	Members []string `json:"members"`
	API     []string `json:"api"`
}

// migrationView is the "migrating" of GET /v1/shards.
type migrationView struct {
	Kind      string `json:"kind"`  // "add" or "remove"
	Shard     string `json:"shard"` // the shard added or removed
	Since     uint64 `json:"since"` // the epoch it started at
	Joined    bool   `json:"joined,omitempty"`
	Moves     int    `json:"moves"`     // partitions that change owner, from the start
	Moved     int    `json:"moved"`     // of them, those that did
	Remaining int    `json:"remaining"` // those still to move
	// Moving is the batch this router moves now, Driving whether it
	// drives the migration (another router may), Error its last step's
	// error (it tries again).
	Moving  []int  `json:"moving,omitempty"`
	Driving bool   `json:"driving"`
	Error   string `json:"error,omitempty"`
}

// migrationOf returns the view of m's migration, nil without one.
func (c *Craftroute) migrationOf(m *shardmap.Map) *migrationView {
	if m == nil || m.Migration == nil {
		return nil
	}
	g := m.Migration
	rem := len(m.Remaining())
	v := &migrationView{Kind: g.Kind, Shard: g.Shard.Name, Since: g.Since, Moves: g.Moves, Remaining: rem,
		Moved: max(0, g.Moves-rem), Joined: g.Kind == shardmap.MigrateAdd && m.Joined()}
	v.Moving, v.Error, v.Driving = c.migr.state()
	return v
}

// startMigration commits m at the next epoch with migration g (the
// partitions' owners made explicit), adopts it, starts driving it and
// answers 202 with it. Nothing changes when the map cannot be committed.
func (a *apiServer) startMigration(w http.ResponseWriter, r *http.Request, cur *shardmap.Map, g *shardmap.Migration) {
	c := a.c
	m := cur.Clone()
	m.Epoch++
	if m.Owners == nil {
		ring, err := cur.Ring()
		if err != nil {
			httpapi.WriteError(w, http.StatusInternalServerError, err.Error())
			return
		}
		m.Owners = ring.Owners()
	}
	g.Since = m.Epoch
	m.Migration = g
	if err := m.Validate(); err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("shard %q: %v; nothing changed", g.Shard.Name, err))
		return
	}
	if !a.commitMap(w, r, m) {
		return
	}
	verb := map[string]string{shardmap.MigrateAdd: "adding", shardmap.MigrateRemove: "removing"}[g.Kind]
	log.Infof("%s shard %s at map epoch %d: %d partitions move", verb, g.Shard.Name, m.Epoch, g.Moves)
	c.migr.consider(c, m, true)
	httpapi.WriteJSON(w, http.StatusAccepted, map[string]any{"epoch": m.Epoch, "migrating": c.migrationOf(m)})
}

// checkMigrationStart answers 409 and returns false when the router has
// no map to change or a migration runs.
func checkMigrationStart(w http.ResponseWriter, cur *shardmap.Map) bool {
	switch {
	case cur == nil:
		httpapi.WriteError(w, http.StatusConflict, "the router has no agreed shard map to change (it routes by its Corefile: give it shard_seed)")
	case cur.Migration != nil:
		httpapi.WriteError(w, http.StatusConflict, fmt.Sprintf("shard %q is being %s: one migration at a time (GET /v1/shards shows its progress)", cur.Migration.Shard.Name, map[string]string{shardmap.MigrateAdd: "added", shardmap.MigrateRemove: "removed"}[cur.Migration.Kind]))
	default:
		return true
	}
	return false
}

// addShard answers POST /v1/shards: {"name","members","api"} joins the
// map and receives the partitions the ring with it gives it, batch by
// batch (202). Its members must answer, be one Raft group, and hold no
// zone; a name in the map, a member of another shard or a malformed
// address is refused (400, 409) and nothing changes.
func (a *apiServer) addShard(w http.ResponseWriter, r *http.Request) {
	c := a.c
	var body newShard
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("body: %v (expected {\"name\": \"c\", \"members\": [\"host:port\", ...], \"api\": [\"http://host:port\", ...]})", err))
		return
	}
	c.mapst.change.Lock()
	defer c.mapst.change.Unlock()
	cur := c.routes().m
	if !checkMigrationStart(w, cur) {
		return
	}
	if slices.Contains(cur.Names(), body.Name) {
		httpapi.WriteError(w, http.StatusConflict, fmt.Sprintf("shard %q is in the map already (epoch %d)", body.Name, cur.Epoch))
		return
	}
	s := shardmap.Shard{Name: body.Name, Members: body.Members, API: body.API}
	target, moves, err := shardmap.AddPlan(cur, body.Name)
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	g := &shardmap.Migration{Kind: shardmap.MigrateAdd, Shard: s, Target: target, Moves: len(moves)}
	probe := cur.Clone()
	probe.Epoch++
	probe.Migration, g.Since = g, probe.Epoch
	if err := probe.Validate(); err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("shard %q: %v; nothing changed", body.Name, err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), shardCallTimeout)
	defer cancel()
	if status, err := c.checkNewShard(ctx, s); err != nil {
		httpapi.WriteError(w, status, fmt.Sprintf("shard %q: %v; nothing changed", body.Name, err))
		return
	}
	if err := c.checkVersions(ctx, cur, &s, true); err != nil {
		httpapi.WriteError(w, http.StatusConflict, fmt.Sprintf("adding shard %q: %v; nothing changed", body.Name, err))
		return
	}
	a.startMigration(w, r, cur, g)
}

// removeShard answers DELETE /v1/shards/{name}: the shard hands its
// partitions to the others, batch by batch, and leaves the map (202); then
// it holds no zone and can be stopped. An unknown shard is a 404, the
// map's only shard a 409.
func (a *apiServer) removeShard(w http.ResponseWriter, r *http.Request) {
	c := a.c
	name := r.PathValue("name")
	c.mapst.change.Lock()
	defer c.mapst.change.Unlock()
	cur := c.routes().m
	if !checkMigrationStart(w, cur) {
		return
	}
	i := slices.IndexFunc(cur.Shards, func(s shardmap.Shard) bool { return s.Name == name })
	if i < 0 {
		httpapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("no shard %q in the map at epoch %d", name, cur.Epoch))
		return
	}
	target, moves, err := shardmap.RemovePlan(cur, name)
	if err != nil {
		httpapi.WriteError(w, http.StatusConflict, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), shardCallTimeout)
	defer cancel()
	if err := c.checkVersions(ctx, cur, nil, true); err != nil {
		httpapi.WriteError(w, http.StatusConflict, fmt.Sprintf("removing shard %q: %v; nothing changed", name, err))
		return
	}
	a.startMigration(w, r, cur, &shardmap.Migration{Kind: shardmap.MigrateRemove, Shard: cur.Shards[i].Clone(), Target: target, Moves: len(moves)})
}

// clusterView is what the check of a new shard reads of a member's
// GET /v1/cluster.
type clusterView struct {
	ID      uint64 `json:"id"`
	Leader  uint64 `json:"leader"`
	Members []struct {
		ID   uint64 `json:"id"`
		Raft string `json:"raft"`
	} `json:"members"`
}

// checkNewShard checks that the members of s answer, are members of one
// Raft group with a leader, and hold no zone; it returns the status of
// the refusal.
func (c *Craftroute) checkNewShard(ctx context.Context, s shardmap.Shard) (int, error) {
	views := make([]clusterView, len(s.API))
	errs := make([]error, len(s.API))
	var wg sync.WaitGroup
	for i, u := range s.API {
		wg.Go(func() { errs[i] = c.getJSON(ctx, u+"/v1/cluster", &views[i]) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return http.StatusBadRequest, fmt.Errorf("member %s (API %s) does not answer: %w", s.Members[i], s.API[i], err)
		}
	}
	group := func(v clusterView) []string {
		var raft []string
		for _, m := range v.Members {
			raft = append(raft, m.Raft)
		}
		slices.Sort(raft)
		return raft
	}
	ids := map[uint64]bool{}
	for i, v := range views {
		if !slices.Equal(group(v), group(views[0])) {
			return http.StatusBadRequest, fmt.Errorf("members %s and %s belong to different Raft groups (%v, %v): a shard is one group", s.Members[0], s.Members[i], group(views[0]), group(v))
		}
		if ids[v.ID] {
			return http.StatusBadRequest, fmt.Errorf("API %s is listed twice for member %d", s.API[i], v.ID)
		}
		ids[v.ID] = true
		if v.Leader == 0 {
			return http.StatusServiceUnavailable, fmt.Errorf("member %s has no leader: the group has no quorum", s.Members[i])
		}
	}
	if len(views[0].Members) != len(s.Members) {
		return http.StatusBadRequest, fmt.Errorf("%d members listed, the group has %d: list every member", len(s.Members), len(views[0].Members))
	}
	var zones []json.RawMessage
	if err := c.getJSON(ctx, s.API[0]+"/v1/zones", &zones); err != nil {
		return http.StatusBadRequest, fmt.Errorf("member %s: zone list: %w", s.Members[0], err)
	}
	if len(zones) > 0 {
		return http.StatusConflict, fmt.Errorf("its members hold %d zones: a shard joins empty (it receives every zone's names)", len(zones))
	}
	return 0, nil
}

// checkVersions checks that every member of m's shards and of extra (a
// shard being added) that answers runs the state machine version of this
// router's build (shardmap.FSMVersion): the members of a group must apply
// a migration's entries alike. With all set, a member that does not answer
// fails the check too (a migration starts only when every member can say).
func (c *Craftroute) checkVersions(ctx context.Context, m *shardmap.Map, extra *shardmap.Shard, all bool) error {
	shards := slices.Clone(m.Shards)
	if extra != nil {
		shards = append(shards, *extra)
	}
	if g := m.Migration; g != nil && !slices.ContainsFunc(shards, func(s shardmap.Shard) bool { return s.Name == g.Shard.Name }) {
		shards = append(shards, g.Shard)
	}
	type member struct{ shard, api string }
	var ms []member
	for _, s := range shards {
		for _, u := range s.API {
			ms = append(ms, member{s.Name, u})
		}
	}
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, mb := range ms {
		wg.Go(func() {
			var v struct {
				Version int `json:"fsm_version"`
			}
			if err := c.getJSON(ctx, mb.api+"/v1/cluster", &v); err != nil {
				if all {
					errs[i] = fmt.Errorf("member %s of shard %s cannot say which version it runs: %v", mb.api, mb.shard, err)
				}
				return
			}
			if v.Version != shardmap.FSMVersion {
				errs[i] = fmt.Errorf("member %s of shard %s runs state machine version %d, this router %d: finish the upgrade of every member and router first", mb.api, mb.shard, v.Version, shardmap.FSMVersion)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// getJSON reads the JSON answer of a member's API at URL u into v.
func (c *Craftroute) getJSON(ctx context.Context, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	if c.cfg.shardToken != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.shardToken)
	}
	resp, err := c.txc.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMapAnswer))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%d %s", resp.StatusCode, body)
	}
	return json.Unmarshal(body, v)
}
