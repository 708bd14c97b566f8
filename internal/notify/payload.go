// Package notify delivers notifications from the outbox to sinks.
//
// The evaluator writes a notifications row in the same transaction as the
// decision that caused it; the Deliverer claims due rows with FOR UPDATE
// SKIP LOCKED and a lease, sends them, and records the outcome. Every
// delivery carries the row's dedupe key, so a receiver recognises a repeat
// after a crash between send and acknowledgement.
package notify

import (
	"encoding/json"
	"time"
)

// Payload is the JSON document a sink sends (the webhook body). Its fields
// are a contract with receivers: extend, never rename.
type Payload struct {
	NotificationID int64  `json:"notification_id"`
	DedupeKey      string `json:"dedupe_key"`
	// Kind is "single" (one match), "digest" (a summary of matches, in
	// Digest; Record and Change are then empty) or "alert" (a problem of
	// lookout itself that the watchdog found, described in Alert; Record
	// names its subject and Change is empty).
	Kind   string `json:"kind"`
	Watch  string `json:"watch"`
	Source string `json:"source"`
	// Owner is the user the watch belongs to; "" for the operator's
	// watches (and for alerts).
	Owner      string        `json:"owner"`
	Title      string        `json:"title"`
	Body       string        `json:"body,omitempty"`
	Record     PayloadRecord `json:"record"`
	Change     PayloadChange `json:"change"`
	Urgency    string        `json:"urgency"`
	Reason     string        `json:"reason"`
	Confidence *float64      `json:"confidence,omitempty"`
	CreatedAt  time.Time     `json:"created_at"`
	// Digest lists the matches of a digest period (kind "digest" only).
	Digest *PayloadDigest `json:"digest,omitempty"`
	// Alert describes the problem (kind "alert" only).
	Alert *PayloadAlert `json:"alert,omitempty"`
}

// PayloadAlert is the alert part of a payload: what the watchdog found.
type PayloadAlert struct {
	// Type is stale (no successful run of a source within its window),
	// stuck (a run whose lease expired, or that runs past
	// sources.stuck_after_seconds), dead_letters (notifications of a sink
	// became dead), disabled (a source was disabled), or model_drift (a
	// watch's week of model decisions drifted from its baseline: drift's).
	Type string `json:"type"`
	// Subject is what the alert is about: a source name (stale, disabled),
	// "<source>/run-<id>" (stuck) or a sink name (dead_letters).
	Subject string `json:"subject"`
	// Since is when the problem began: the last successful run (or the
	// registration, for a source that never succeeded), the run's start,
	// the oldest new dead letter, the disabling.
	Since *time.Time `json:"since,omitempty"`
	// Details are the facts behind the alert (last_error, failure_count,
	// stale_after_seconds, lease_owner, count, ...).
	Details map[string]any `json:"details,omitempty"`
}

// PayloadDigest is the digest part of a payload.
type PayloadDigest struct {
	// Count is the number of matches in the period; Items lists at most
	// MaxDigestItems of them, oldest first.
	Count int `json:"count"`
	// DueAt is the schedule tick that closed the period.
	DueAt time.Time           `json:"due_at"`
	Items []PayloadDigestItem `json:"items"`
	// Briefing is the model's briefing of a summarized digest; absent
	// without one.
	Briefing *PayloadBriefing `json:"briefing,omitempty"`
	// SummaryMissing says why a summarized digest has no briefing.
	SummaryMissing string `json:"summary_missing,omitempty"`
}

// PayloadBriefing is the model's briefing of a digest: a headline and the
// items that matter, each citing one of the digest's records.
type PayloadBriefing struct {
	// Headline is the model's one-sentence gist, empty when it was dropped
	// (it cited no item); HeadlineCitations are the records it cites.
	Headline          string   `json:"headline"`
	HeadlineCitations []string `json:"headline_citations"`
	// Items are the cited items, most important first.
	Items []PayloadBriefingItem `json:"items"`
	// DroppedSentences counts the model's sentences left out because they
	// cite no item of the digest (they are never shown).
	DroppedSentences int `json:"dropped_sentences"`
	// Model, ModelDigest and PromptVersion say who wrote it with which
	// question; ModelCallID is its model_calls row.
	Model         string `json:"model"`
	ModelDigest   string `json:"model_digest"`
	PromptVersion string `json:"prompt_version"`
	ModelCallID   *int64 `json:"model_call_id,omitempty"`
}

// PayloadBriefingItem is one cited item of a briefing.
type PayloadBriefingItem struct {
	// RecordID is the cited record, one of the digest's items.
	RecordID string `json:"record_id"`
	// NotificationID is the digest item (the newest match of the record).
	NotificationID int64  `json:"notification_id"`
	WhyItMatters   string `json:"why_it_matters"`
}

// PayloadDigestItem is one match in a digest.
type PayloadDigestItem struct {
	NotificationID int64         `json:"notification_id"`
	DedupeKey      string        `json:"dedupe_key"`
	Title          string        `json:"title"`
	Record         PayloadRecord `json:"record"`
	Change         PayloadChange `json:"change"`
	Urgency        string        `json:"urgency"`
	Reason         string        `json:"reason"`
	CreatedAt      time.Time     `json:"created_at"`
}

// MaxDigestItems bounds the items listed in one digest payload and body.
const MaxDigestItems = 200

// PayloadRecord is the record part of a payload.
type PayloadRecord struct {
	ID          string         `json:"id"`
	Title       string         `json:"title,omitempty"`
	URL         string         `json:"url,omitempty"`
	Author      string         `json:"author,omitempty"`
	Status      string         `json:"status,omitempty"`
	Labels      []string       `json:"labels,omitempty"`
	Body        string         `json:"body,omitempty"`
	CreatedAt   string         `json:"created_at,omitempty"`
	UpdatedAt   string         `json:"updated_at,omitempty"`
	Extra       map[string]any `json:"extra,omitempty"`
	ContentHash string         `json:"content_hash,omitempty"`
}

// PayloadChange is the change part of a payload.
type PayloadChange struct {
	ID            int64    `json:"id"`
	Kind          string   `json:"kind"`
	Version       int      `json:"version"`
	ChangedFields []string `json:"changed_fields"`
}

// Marshal encodes p.
func (p *Payload) Marshal() []byte {
	b, _ := json.Marshal(p)
	return b
}

// RecordFromFields builds the payload record from a canonical field map
// (normalize.Record.Fields, or a change snapshot).
func RecordFromFields(f map[string]any) PayloadRecord {
	str := func(k string) string { s, _ := f[k].(string); return s }
	r := PayloadRecord{ID: str("id"), Title: str("title"), URL: str("url"), Author: str("author"),
		Status: str("status"), Body: str("body"), CreatedAt: str("created_at"), UpdatedAt: str("updated_at")}
	switch l := f["labels"].(type) {
	case []string:
		r.Labels = l
	case []any:
		for _, v := range l {
			if s, ok := v.(string); ok {
				r.Labels = append(r.Labels, s)
			}
		}
	}
	if x, ok := f["extra"].(map[string]any); ok && len(x) > 0 {
		r.Extra = x
	}
	return r
}
