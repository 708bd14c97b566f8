package semantic

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/ollama/ollama/api"
)

type cached struct {
	verdict Verdict
	callID  *int64
}

// lookup reads the cached verdicts of keys[i] for i in idx.
func (j *Judge) lookup(ctx context.Context, keys []cacheKey, idx []int) (map[cacheKey]cached, error) {
	out := map[cacheKey]cached{}
	if len(idx) == 0 {
		return out, nil
	}
	var vs, ds, hs []string
	for _, i := range idx {
		vs, ds, hs = append(vs, keys[i].version), append(ds, keys[i].digest), append(hs, keys[i].input)
	}
	rows, err := j.pool.Query(ctx, `
		SELECT v.prompt_version, v.model_digest, v.input_hash, v.should_notify, v.urgency, v.confidence, v.reason, v.model_call_id
		FROM verdicts v
		JOIN (SELECT DISTINCT * FROM unnest($1::text[], $2::text[], $3::text[])) AS k(pv, digest, hash)
		  ON v.prompt_version = k.pv AND v.model_digest = k.digest AND v.input_hash = k.hash`, vs, ds, hs)
	if err != nil {
		return nil, fmt.Errorf("look up cached verdicts: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k cacheKey
		var c cached
		if err := rows.Scan(&k.version, &k.digest, &k.input, &c.verdict.ShouldNotify, &c.verdict.Urgency,
			&c.verdict.Confidence, &c.verdict.Reason, &c.callID); err != nil {
			return nil, fmt.Errorf("look up cached verdicts: %w", err)
		}
		out[k] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("look up cached verdicts: %w", err)
	}
	return out, nil
}

// countHits adds the hits to verdicts.hits (one per occurrence).
func (j *Judge) countHits(ctx context.Context, keys []cacheKey) error {
	if len(keys) == 0 {
		return nil
	}
	var vs, ds, hs []string
	for _, k := range keys {
		vs, ds, hs = append(vs, k.version), append(ds, k.digest), append(hs, k.input)
	}
	_, err := j.pool.Exec(ctx, `
		UPDATE verdicts v SET hits = v.hits + k.n, last_hit_at = now()
		FROM (SELECT pv, digest, hash, count(*)::int AS n
		      FROM unnest($1::text[], $2::text[], $3::text[]) AS u(pv, digest, hash)
		      GROUP BY 1, 2, 3) AS k
		WHERE v.prompt_version = k.pv AND v.model_digest = k.digest AND v.input_hash = k.hash`, vs, ds, hs)
	if err != nil {
		return fmt.Errorf("count verdict cache hits: %w", err)
	}
	return nil
}

// callRow is one model_calls row.
type callRow struct {
	purpose   string
	req       *Request
	model     string
	digest    string
	inputHash string
	msgs      []api.Message
	attempt   int
	reply     Reply
	owner     string
	outcome   string
	output    json.RawMessage
	verdict   *Verdict
	err       error
}

// maxRawOutput bounds the raw answer kept for a call whose answer is not JSON.
const maxRawOutput = 2000

func (j *Judge) insertCall(ctx context.Context, c *callRow) (int64, error) {
	r := c.req
	type msgSize struct {
		Role  string `json:"role"`
		Chars int    `json:"chars"`
	}
	sizes := make([]msgSize, len(c.msgs))
	for i, m := range c.msgs {
		sizes[i] = msgSize{m.Role, len(m.Content)}
	}
	request, _ := json.Marshal(map[string]any{
		"options":     r.Question.Options,
		"format":      "verdict schema, reason_max_chars " + strconv.Itoa(r.Question.ReasonMax),
		"stream":      false,
		"messages":    sizes,
		"timeout_ms":  r.Question.Timeout.Milliseconds(),
		"done_reason": c.reply.DoneReason,
	})
	var output any
	var raw *string
	if c.output != nil {
		output = c.output
	} else if c.reply.Content != "" {
		s := snippet(c.reply.Content, maxRawOutput)
		raw = &s
	}
	var shouldNotify *bool
	var urgency, reason *string
	var confidence *float64
	if v := c.verdict; v != nil {
		shouldNotify, urgency, reason, confidence = &v.ShouldNotify, &v.Urgency, &v.Reason, &v.Confidence
	}
	var errText *string
	if c.err != nil {
		s := c.err.Error()
		errText = &s
	}
	var changeID *int64
	if r.ChangeID != 0 {
		changeID = &r.ChangeID
	}
	var id int64
	err := j.pool.QueryRow(ctx, `
		INSERT INTO model_calls (purpose, change_id, source, record_id, watch, content_hash, model, model_digest,
		                         prompt_version, input_ref, input_hash, request, output, raw_output, should_notify,
		                         urgency, confidence, reason, prompt_tokens, output_tokens, latency_ms, outcome,
		                         error, attempt, evaluator, owner)
		VALUES ($1, $2, $3, $4, $5, NULLIF($6, ''), $7, $8, $9, $10, $11, $12, $13, $14, $15,
		        $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26)
		RETURNING id`,
		c.purpose, changeID, r.Source, r.RecordID, r.Watch, r.ContentHash, c.model, c.digest,
		r.Question.Version, fmt.Sprintf("change:%d", r.ChangeID), c.inputHash, request, output, raw, shouldNotify,
		urgency, confidence, reason, c.reply.PromptTokens, c.reply.OutputTokens,
		float64(c.reply.Latency.Microseconds())/1000, c.outcome, errText, c.attempt, c.owner, r.Owner).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("record model call: %w", err)
	}
	return id, nil
}

func (j *Judge) insertVerdict(ctx context.Context, r *Request, res Result, callID int64, v Verdict) error {
	_, err := j.pool.Exec(ctx, `
		INSERT INTO verdicts (prompt_version, model_digest, input_hash, content_hash, model, source, watch,
		                      should_notify, urgency, confidence, reason, model_call_id)
		VALUES ($1, $2, $3, NULLIF($4, ''), $5, $6, $7, $8, $9, $10, $11, $12)
		ON CONFLICT ON CONSTRAINT verdicts_pkey DO NOTHING`,
		res.PromptVersion, res.ModelDigest, res.InputHash, r.ContentHash, res.Model, r.Source, r.Watch,
		v.ShouldNotify, v.Urgency, v.Confidence, v.Reason, callID)
	if err != nil {
		return fmt.Errorf("cache verdict: %w", err)
	}
	return nil
}
