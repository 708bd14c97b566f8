package normalize

import (
	"fmt"
	"slices"
	"strings"

	"github.com/expr-lang/expr/types"
)

// CompileTaskWhen compiles and type-checks the eligibility condition of a
// task watch (a source's tasks:) against the shape of the source's records,
// like CompileWhen. A task is a record, not a change, so the variables are
//
//	record    the record as last mirrored (the shape CompileWhen describes)
//	source    the source name
//
// and previous, change and changed() are unknown names. Problems are
// reported as by CompileWhen.
func CompileTaskWhen(src string, f FieldExprs) (*Condition, error) {
	rec := recordType(f.Extra)
	env := types.Map{"record": rec, "source": types.String}
	roots := map[string]*root{"record": {fields: recordFields, extra: f.Extra, declared: f.Extra != nil}}
	return compileCondition(src, env, roots, nil)
}

// CheckRecordPath reports whether path names a field of a record: one of
// id, title, body, url, author, status, labels, created_at, updated_at, or
// extra.<key> (one fields.extra declares, when it is set). It is the check
// of a task watch's order keys.
func CheckRecordPath(path string, f FieldExprs) error {
	if k, ok := strings.CutPrefix(path, "extra."); ok && k != "" {
		if f.Extra == nil {
			return nil
		}
		if _, ok := f.Extra[k]; ok {
			return nil
		}
		return fmt.Errorf("names an unknown field %q%s", path, suggestExtra(k, f.Extra, "extra."))
	}
	if path != "extra" && slices.Contains(recordFields, path) {
		return nil
	}
	known := []string{"id", "title", "body", "url", "author", "status", "labels", "created_at", "updated_at"}
	if s := suggest(path, known, ""); s != "" {
		return fmt.Errorf("names an unknown field %q%s", path, s)
	}
	return fmt.Errorf("names an unknown field %q (known: %s, extra.<key>)", path, strings.Join(known, ", "))
}

// RecordValue returns the value at path (see CheckRecordPath) of a
// record's fields (Record.Fields), or nil.
func RecordValue(fields map[string]any, path string) any {
	if k, ok := strings.CutPrefix(path, "extra."); ok {
		extra, _ := fields["extra"].(map[string]any)
		return extra[k]
	}
	return fields[path]
}

// CompileReviewCheck compiles and type-checks the deterministic check of a
// task review's criterion (a task watch's review.criteria[].check). It is
// evaluated over the attempt's result before the model is asked:
//
//	result    the executor's result (a JSON object: any shape)
//	source    the source name
//	task      the task watch's name
//
// Problems are reported as by CompileWhen.
func CompileReviewCheck(src string) (*Condition, error) {
	env := types.Map{"result": types.Any, "source": types.String, "task": types.String}
	return compileCondition(src, env, map[string]*root{}, nil)
}
