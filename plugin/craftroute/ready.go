package craftroute

import "time"

// Ready implements ready.Readiness: true while every shard has a member that
// answered (a query or a probe; the probes' first round asks every member)
// and is not marked down, once the seed zones are imported (or found
// present). Without probes only the seeds count. A router started from
// shard_seed alone is not ready before it has read the shard map, and a
// router that read it is not while it reaches no member to read it again
// (it answers meanwhile by its last map).
func (c *Craftroute) Ready() bool {
	if c.seedsPending.Load() > 0 || len(c.shards()) == 0 || c.mapst.unreachable.Load() {
		return false
	}
	if c.cfg.probe == 0 {
		return true
	}
	now := time.Now()
	for _, s := range c.shards() {
		alive := false
		for _, m := range s.Members {
			if m.Alive(now) {
				alive = true
				break
			}
		}
		if !alive {
			return false
		}
	}
	return true
}
