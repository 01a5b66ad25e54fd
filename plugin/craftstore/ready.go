package craftstore

// Ready implements ready.Readiness: true once the member knows a leader and
// has applied what it knew to be committed when it started.
func (c *Craftstore) Ready() bool {
	rep := c.rep.Load()
	return rep != nil && rep.Ready()
}
