package replica

// Seeded reports whether a seed import of zone committed in the group, as
// far as this member has applied it and its view serves the result (the
// view of a zone is rebuilt after the transaction that imported it).
func (r *Replica) Seeded(zone string) bool { return (*r.seeded.Load())[zone] }

// noteSeeded adds zone to the seeded zones of the view.
func (r *Replica) noteSeeded(zone string) {
	next := map[string]bool{zone: true}
	for z := range *r.seeded.Load() {
		next[z] = true
	}
	r.seeded.Store(&next)
}
