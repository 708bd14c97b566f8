package notion

import (
	"cmp"
	"errors"
	"regexp"
	"strings"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
)

// Defaults of the notion: block.
const (
	BaseURLDefault  = "https://api.notion.com"
	VersionDefault  = "2022-06-28"
	LookbackDefault = 2 * time.Minute
	PageSizeDefault = 100
	MaxPagesDefault = 1000
)

// Host is the API host; its request budget is declared in init.
const Host = "api.notion.com"

// RateDefault is the budget declared for Host: Notion documents "an
// average of three requests per second" per integration, with some bursts.
var RateDefault = config.RateLimit{PerSecond: 3, Burst: 3}

// Settings is the notion: block of a source.
type Settings struct {
	// Database is the database id (32 hex digits, with or without dashes,
	// as in the database's URL). Required.
	Database string `yaml:"database"`
	// Token is the integration's secret, written as ${ENV_VAR}. Required.
	Token string `yaml:"token"`
	// Version is the Notion-Version header. Versions from 2025-09-03 on
	// query data sources instead of databases, which this connector does
	// not implement. Defaults to 2022-06-28.
	Version string `yaml:"version"`
	// BaseURL is the API root. Defaults to https://api.notion.com.
	BaseURL string `yaml:"base_url"`
	// Lookback is subtracted from the largest last_edited_time seen, since
	// Notion rounds it to the minute. Defaults to 2m.
	Lookback *time.Duration `yaml:"lookback"`
	// PageSize is the query's page_size, 1 to 100. Defaults to 100.
	PageSize int `yaml:"page_size"`
	// MaxPages bounds one run; the next run continues where it stopped.
	// Defaults to 1000.
	MaxPages int `yaml:"max_pages"`
	// Snapshot makes every run a full scan of the database, so that pages
	// deleted, archived or moved to the trash are recorded as deleted.
	// Defaults to false (incremental on last_edited_time).
	Snapshot bool `yaml:"snapshot"`
	// Status names the property whose value becomes the record's status
	// (status, select or any property). Defaults to task.status when a
	// task block is set, else none.
	Status string `yaml:"status"`
	// Task names the properties and values the connector writes when it
	// acts on a task (connectors.Actor). Defaults to the names below when
	// absent; only task.status must exist in the database.
	Task *Task `yaml:"task"`

	// explicit lists the task keys the file set (a property a file names
	// must exist; a default that does not is skipped).
	explicit map[string]bool
}

// Task is the task: sub-block: the property names (and status values)
// written back to a task. A property left at its default that the
// database does not have is not written; one the file names must exist.
type Task struct {
	// Status is the status or select property moved through the states.
	// Defaults to Status.
	Status string `yaml:"status"`
	// Todo, InProgress, Complete and Failed are its values. Default to
	// Todo, InProgress, Complete and Failed.
	Todo       string `yaml:"todo"`
	InProgress string `yaml:"in_progress"`
	Complete   string `yaml:"complete"`
	Failed     string `yaml:"failed"`
	// ClaimedBy (text or select) names the claimer. Defaults to ClaimedBy.
	ClaimedBy string `yaml:"claimed_by"`
	// ClaimedAt (date) is when the claim was taken. Defaults to ClaimedAt.
	ClaimedAt string `yaml:"claimed_at"`
	// ClaimExpiresAt (date) is when it lapses. Defaults to ClaimExpiresAt.
	ClaimExpiresAt string `yaml:"claim_expires_at"`
	// RunID (text) is the run holding the claim. Defaults to RunId.
	RunID string `yaml:"run_id"`
	// RetryCount (number) counts failed attempts. Defaults to RetryCount.
	RetryCount string `yaml:"retry_count"`
	// LastError (text) is the last failure. Defaults to LastError.
	LastError string `yaml:"last_error"`
	// CompletedAt (date) is when the task completed. Defaults to CompletedAt.
	CompletedAt string `yaml:"completed_at"`
}

// TaskDefaults are the task: block's defaults (the seed's property names).
var TaskDefaults = Task{Status: "Status", Todo: "Todo", InProgress: "InProgress", Complete: "Complete", Failed: "Failed",
	ClaimedBy: "ClaimedBy", ClaimedAt: "ClaimedAt", ClaimExpiresAt: "ClaimExpiresAt", RunID: "RunId",
	RetryCount: "RetryCount", LastError: "LastError", CompletedAt: "CompletedAt"}

var idRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$`)
var versionRE = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}$`)

// Decode reads the notion: block of src, applies its defaults and checks it.
func Decode(src *config.Source) (*Settings, error) {
	n := &Settings{}
	if err := src.DecodeBlock(n); err != nil {
		return nil, err
	}
	var errs []error
	bad := func(key, format string, args ...any) { errs = append(errs, src.Errorf(key, format, args...)) }
	switch {
	case n.Database == "":
		bad("notion.database", "is required (the database id from its URL)")
	case !idRE.MatchString(n.Database):
		bad("notion.database", "must be a database id (32 hex digits), not %q", n.Database)
	}
	switch {
	case n.Token == "":
		bad("notion.token", "is required (the integration's secret, as ${ENV_VAR})")
	case strings.ContainsAny(n.Token, " \r\n"):
		bad("notion.token", "contains white space (is the ${ENV} reference right?)")
	}
	n.Version = cmp.Or(n.Version, VersionDefault)
	switch {
	case !versionRE.MatchString(n.Version):
		bad("notion.version", "must be a Notion-Version date (YYYY-MM-DD), not %q", n.Version)
	case n.Version >= "2025-09-03":
		bad("notion.version", "%s queries data sources instead of databases, which this connector does not implement; use %s", n.Version, VersionDefault)
	}
	n.BaseURL = strings.TrimRight(cmp.Or(n.BaseURL, BaseURLDefault), "/")
	errs = append(errs, connectors.CheckURL(src, "notion.base_url", n.BaseURL))
	if n.Lookback == nil {
		d := LookbackDefault
		n.Lookback = &d
	} else if *n.Lookback < 0 {
		bad("notion.lookback", "must not be negative")
	}
	n.PageSize = cmp.Or(n.PageSize, PageSizeDefault)
	if n.PageSize < 1 || n.PageSize > 100 {
		bad("notion.page_size", "must be between 1 and 100, not %d", n.PageSize)
	}
	if n.MaxPages < 0 {
		bad("notion.max_pages", "must be positive")
	}
	n.MaxPages = cmp.Or(n.MaxPages, MaxPagesDefault)
	n.explicit = map[string]bool{}
	if n.Task != nil {
		t := n.Task
		for _, f := range taskFields(t) {
			if *f.value != "" {
				n.explicit[f.key] = true
			}
			*f.value = cmp.Or(*f.value, f.def)
		}
		states := map[string]string{}
		for _, f := range taskFields(t)[1:5] {
			if prev, dup := states[*f.value]; dup {
				bad("notion.task."+f.key, "%q is also task.%s: the four states need four values", *f.value, prev)
			}
			states[*f.value] = f.key
		}
		n.Status = cmp.Or(n.Status, t.Status)
	}
	return n, errors.Join(errs...)
}

// taskField is one key of the task block.
type taskField struct {
	key   string
	value *string
	def   string
	// kinds are the property types that can hold it.
	kinds []string
}

var (
	textKinds   = []string{"rich_text", "select"}
	dateKinds   = []string{"date"}
	numberKinds = []string{"number"}
	statusKinds = []string{"status", "select"}
)

// taskFields lists t's keys: status, its four values, then the properties.
func taskFields(t *Task) []taskField {
	d := TaskDefaults
	return []taskField{
		{"status", &t.Status, d.Status, statusKinds},
		{"todo", &t.Todo, d.Todo, nil},
		{"in_progress", &t.InProgress, d.InProgress, nil},
		{"complete", &t.Complete, d.Complete, nil},
		{"failed", &t.Failed, d.Failed, nil},
		{"claimed_by", &t.ClaimedBy, d.ClaimedBy, textKinds},
		{"claimed_at", &t.ClaimedAt, d.ClaimedAt, dateKinds},
		{"claim_expires_at", &t.ClaimExpiresAt, d.ClaimExpiresAt, dateKinds},
		{"run_id", &t.RunID, d.RunID, textKinds},
		{"retry_count", &t.RetryCount, d.RetryCount, numberKinds},
		{"last_error", &t.LastError, d.LastError, textKinds},
		{"completed_at", &t.CompletedAt, d.CompletedAt, dateKinds},
	}
}
