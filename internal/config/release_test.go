package config

import "testing"

// A released source parsed from its stored definition keeps no key lines
// either: after ForgetLines they are not the file's, and Line is 0
// whether they are kept or not. A source whose lines are its document's
// keeps them for its errors.
func TestReleaseDropsLinesThatAreNotTheFiles(t *testing.T) {
	t.Parallel()
	parse := func() *Source {
		t.Helper()
		src, err := ParseSource("definition", []byte("name: x\nconnector: file\nevery: 1h\nfile: {paths: [a.jsonl]}\n"), &Global{})
		if err != nil {
			t.Fatal(err)
		}
		return src
	}
	stored := parse()
	stored.ForgetLines()
	stored.Release()
	if stored.lines != nil {
		t.Errorf("a released source of a stored definition keeps %d key lines", len(stored.lines))
	}
	if got := stored.Line("every"); got != 0 {
		t.Errorf("Line(every) = %d, want 0", got)
	}
	own := parse()
	own.Release()
	if got := own.Line("every"); got != 3 {
		t.Errorf("Line(every) of a released source with its own lines = %d, want 3", got)
	}
}
