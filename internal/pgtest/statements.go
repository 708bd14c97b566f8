package pgtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Statement is one statement of a release's statements file
// (migrations/testdata/release-<name>.sql): the SQL as Normalize left it
// and the functions that sent it while the suite ran.
type Statement struct {
	// SQL is the statement without its final semicolon; a COPY FROM is
	// written `COPY "table" ("a", "b") FROM STDIN` (CopyStatement).
	SQL string
	// From lists the senders (module-relative function names).
	From []string
	// Line is the statement's first line in the file it was parsed from.
	Line int
}

// Recording is what the processes of a recording run wrote, merged.
type Recording struct {
	// Statements are sorted by SQL, each once, with every sender.
	Statements []Statement
	// Skipped maps a reason to the statements left out for it.
	Skipped map[string][]string
}

// ReadRecording merges the files the processes of a run with RecordEnv
// set wrote into dir.
func ReadRecording(dir string) (Recording, error) {
	files, err := filepath.Glob(filepath.Join(dir, "sql-*.jsonl"))
	if err != nil {
		return Recording{}, fmt.Errorf("list %s: %w", dir, err)
	}
	if len(files) == 0 {
		return Recording{}, fmt.Errorf("%s holds no recording (sql-*.jsonl): was the suite run with %s=%s?", dir, RecordEnv, dir)
	}
	from := map[string]map[string]bool{}
	skipped := map[string]map[string]bool{}
	for _, name := range files {
		if err := readRecordingFile(name, from, skipped); err != nil {
			return Recording{}, err
		}
	}
	var rec Recording
	for sql, senders := range from {
		s := Statement{SQL: sql}
		for f := range senders {
			s.From = append(s.From, f)
		}
		sort.Strings(s.From)
		rec.Statements = append(rec.Statements, s)
	}
	sort.Slice(rec.Statements, func(i, j int) bool { return rec.Statements[i].SQL < rec.Statements[j].SQL })
	rec.Skipped = map[string][]string{}
	for reason, stmts := range skipped {
		for s := range stmts {
			rec.Skipped[reason] = append(rec.Skipped[reason], s)
		}
		sort.Strings(rec.Skipped[reason])
	}
	return rec, nil
}

func readRecordingFile(name string, from, skipped map[string]map[string]bool) error {
	f, err := os.Open(name)
	if err != nil {
		return fmt.Errorf("read recording: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for n := 1; sc.Scan(); n++ {
		var l recordedLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return fmt.Errorf("%s:%d: %w", name, n, err)
		}
		if l.SQL == "" {
			return fmt.Errorf("%s:%d: sql is empty", name, n)
		}
		if l.Skip != "" {
			if skipped[l.Skip] == nil {
				skipped[l.Skip] = map[string]bool{}
			}
			skipped[l.Skip][l.SQL] = true
			continue
		}
		if from[l.SQL] == nil {
			from[l.SQL] = map[string]bool{}
		}
		from[l.SQL][l.From] = true
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	return nil
}

// fromPrefix starts the comment lines that name a statement's senders.
const fromPrefix = "-- from: "

// WriteStatements writes a release's statements file: header (comment
// lines, "-- " added), then each statement after its senders, ended by a
// semicolon, statements separated by an empty line.
func WriteStatements(w io.Writer, header string, stmts []Statement) error {
	var b bytes.Buffer
	for l := range strings.SplitSeq(strings.TrimRight(header, "\n"), "\n") {
		b.WriteString(strings.TrimRight("-- "+l, " ") + "\n")
	}
	for _, s := range stmts {
		b.WriteString("\n")
		for _, f := range s.From {
			b.WriteString(fromPrefix + f + "\n")
		}
		b.WriteString(s.SQL + ";\n")
	}
	_, err := w.Write(b.Bytes())
	return err
}

// ParseStatements reads a file WriteStatements wrote; name is used in
// errors.
func ParseStatements(r io.Reader, name string) ([]Statement, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	var out []Statement
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); {
		// One block: the lines up to the next empty line.
		j := i
		for j < len(lines) && lines[j] != "" {
			j++
		}
		block := lines[i:j]
		start := i + 1
		i = j + 1
		if len(block) == 0 || !slices.ContainsFunc(block, func(l string) bool { return !strings.HasPrefix(l, "--") }) {
			continue // a comment block (the header)
		}
		var s Statement
		k := 0
		for ; k < len(block) && strings.HasPrefix(block[k], fromPrefix); k++ {
			s.From = append(s.From, strings.TrimPrefix(block[k], fromPrefix))
		}
		s.Line = start + k
		sql := strings.Join(block[k:], "\n")
		if !strings.HasSuffix(sql, ";") {
			return nil, fmt.Errorf("%s:%d: the statement does not end with a semicolon before the empty line", name, s.Line)
		}
		s.SQL = strings.TrimSuffix(sql, ";")
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, errors.New(name + ": no statements")
	}
	return out, nil
}
