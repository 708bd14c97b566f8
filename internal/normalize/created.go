package normalize

// CreatedFields is ChangedFields(nil, r.Fields()) — the fields a created
// change lists: the non-empty top-level fields and every extra key, less
// the volatile paths — without building r's field map (a first sync
// lists them for every record it writes).
func (h *Hasher) CreatedFields(r *Record) []string {
	top := [...]bool{
		r.ID != "", r.Title != "", r.Body != "", r.URL != "", r.Author != "", r.Status != "",
		len(r.Labels) > 0, r.CreatedAt != nil, r.UpdatedAt != nil,
	}
	out := make([]string, 0, len(fieldNames)+len(r.Extra))
	for i, name := range fieldNames {
		if top[i] && !h.volatile[name] {
			out = append(out, name)
		}
	}
	return h.appendExtraPaths(out, r.Extra)
}
