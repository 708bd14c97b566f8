package web

import (
	"fmt"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
)

// Bounds of what a whole-page change carries.
const (
	// MaxDiffBytes bounds the unified diff.
	MaxDiffBytes = 16 << 10
	// MaxDiffLines bounds the added and removed lists.
	MaxDiffLines = 200
	// MaxKeptText bounds the page text kept (gzipped) in the cursor to
	// diff the next run against; a longer page's change carries no diff.
	MaxKeptText = 128 << 10
)

// Diff is the line diff between two versions of a page's text.
type Diff struct {
	// Unified is the diff in unified format (one line of context),
	// cut at MaxDiffBytes.
	Unified string `json:"diff,omitempty"`
	// Added and Removed are the lines added and removed, at most
	// MaxDiffLines each.
	Added   []string `json:"added,omitempty"`
	Removed []string `json:"removed,omitempty"`
}

// LineDiff compares the lines of before and after.
func LineDiff(before, after []string) Diff {
	m := difflib.NewMatcher(before, after)
	var d Diff
	for _, op := range m.GetOpCodes() {
		if op.Tag == 'r' || op.Tag == 'd' {
			d.Removed = appendBounded(d.Removed, before[op.I1:op.I2])
		}
		if op.Tag == 'r' || op.Tag == 'i' {
			d.Added = appendBounded(d.Added, after[op.J1:op.J2])
		}
	}
	if len(d.Added) == 0 && len(d.Removed) == 0 {
		return Diff{}
	}
	u, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: withNewlines(before), B: withNewlines(after), FromFile: "before", ToFile: "after", Context: 1,
	})
	if err != nil {
		u = fmt.Sprintf("(no diff: %v)\n", err)
	}
	if len(u) > MaxDiffBytes {
		cut := strings.LastIndexByte(u[:MaxDiffBytes], '\n') + 1
		u = u[:cut] + fmt.Sprintf("... (%d more bytes)\n", len(u)-cut)
	}
	d.Unified = u
	return d
}

func appendBounded(dst, src []string) []string {
	for _, s := range src {
		if len(dst) >= MaxDiffLines {
			break
		}
		dst = append(dst, s)
	}
	return dst
}

func withNewlines(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = l + "\n"
	}
	return out
}
