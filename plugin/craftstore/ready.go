package craftstore

// Ready implements ready.Readiness. It is true when the member may answer
// for its group (replica/health.go: it knows a leader, has applied what the
// leader told it was committed, has not lost touch with its group for three
// election timeouts, and its storage works) and every zone this block seeds
// has been seeded in the group, so that traffic never reaches a member that
// would answer REFUSED for a zone it is about to serve.
func (c *Craftstore) Ready() bool {
	rep := c.rep.Load()
	if rep == nil || !rep.Ready() {
		return false
	}
	for origin := range c.cfg.seeds {
		if !rep.Seeded(origin) {
			return false
		}
	}
	return true
}
