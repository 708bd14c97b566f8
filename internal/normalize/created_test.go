package normalize

import (
	"slices"
	"testing"
	"time"
)

// TestCreatedFieldsIsChangedFieldsOfNothing checks CreatedFields against
// ChangedFields(nil, r.Fields()) on records with every field empty or set,
// and volatile paths at the top level and in extra.
func TestCreatedFieldsIsChangedFieldsOfNothing(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	recs := []Record{
		{ID: "empty"},
		{ID: "1", Title: "t", Body: "b", URL: "u", Author: "a", Status: "s", Labels: []string{"x"}, CreatedAt: &now, UpdatedAt: &now,
			Extra: map[string]any{"views": 3, "b": nil, "a": map[string]any{}, "c": "", "z": []any{}}},
		{ID: "2", Labels: []string{}, UpdatedAt: &now, Extra: map[string]any{}},
	}
	for _, volatile := range [][]string{nil, {"updated_at", "extra.views"}, {"title", "labels", "extra.a"}} {
		h, err := NewHasher(volatile)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			want := h.ChangedFields(nil, r.Fields())
			if got := h.CreatedFields(&r); !slices.Equal(got, want) {
				t.Errorf("volatile %v, record %s: CreatedFields %q, ChangedFields %q", volatile, r.ID, got, want)
			}
		}
	}
}
