package semantic

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/modelspec"
)

func TestParseVerdict(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 41)
	tests := []struct {
		name    string
		content string
		want    Verdict
		err     string // "" = valid
		json    bool   // output kept as JSON
	}{
		{"valid", `{"should_notify":true,"urgency":"high","reason":"Outage.","confidence":0.9}`,
			Verdict{true, "high", "Outage.", 0.9}, "", true},
		{"whitespace and any confidence in range", " {\n\"should_notify\" : false, \"urgency\":\"low\",\"reason\":\" ok \",\"confidence\":0.37}\n",
			Verdict{false, "low", "ok", 0.37}, "", true},
		{"not JSON", `{"should_notify": true, "urg`, Verdict{}, `malformed answer: not JSON: "{\"should_notify\": true, \"urg"`, false},
		{"not an object", `[1,2]`, Verdict{}, "malformed answer: not a JSON object", true},
		{"missing field", `{"should_notify":true,"urgency":"high","reason":"r"}`, Verdict{}, "malformed answer: confidence is missing", true},
		{"wrong type", `{"should_notify":"yes","urgency":"high","reason":"r","confidence":1}`, Verdict{},
			`malformed answer: should_notify must be a boolean, not "yes"`, true},
		{"null", `{"should_notify":null,"urgency":"high","reason":"r","confidence":1}`, Verdict{},
			`malformed answer: should_notify must be a boolean, not null`, true},
		{"urgency enum", `{"should_notify":true,"urgency":"critical","reason":"r","confidence":1}`, Verdict{},
			`malformed answer: urgency must be low, medium or high, not "critical"`, true},
		{"confidence range", `{"should_notify":true,"urgency":"low","reason":"r","confidence":-9}`, Verdict{},
			"malformed answer: confidence must be between 0 and 1, not -9", true},
		{"empty reason", `{"should_notify":true,"urgency":"low","reason":"  ","confidence":1}`, Verdict{},
			"malformed answer: reason is empty", true},
		{"long reason", `{"should_notify":true,"urgency":"low","reason":"` + long + `","confidence":1}`, Verdict{},
			"malformed answer: reason has 41 characters, more than 40", true},
		{"extra key", `{"should_notify":true,"urgency":"low","reason":"r","confidence":1,"x":2}`, Verdict{},
			`malformed answer: unexpected key "x"`, true},
		{"several problems sorted", `{"urgency":"x","reason":"r","confidence":2}`, Verdict{},
			`malformed answer: confidence must be between 0 and 1, not 2; should_notify is missing; urgency must be low, medium or high, not "x"`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, raw, err := ParseVerdict(tt.content, 40)
			if tt.err == "" {
				if err != nil {
					t.Fatalf("ParseVerdict: %v", err)
				}
				if got != tt.want {
					t.Errorf("verdict = %+v, want %+v", got, tt.want)
				}
			} else {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("error = %v, want %q", err, tt.err)
				}
				if !errors.Is(err, ErrMalformed) {
					t.Errorf("error does not wrap ErrMalformed")
				}
			}
			if tt.json != (raw != nil) {
				t.Errorf("raw output kept = %v, want %v", raw != nil, tt.json)
			}
		})
	}
}

func TestSchemaIsValidJSONAndBoundsTheAnswer(t *testing.T) {
	t.Parallel()
	var s struct {
		Properties struct {
			Reason     struct{ MaxLength int }  `json:"reason"`
			Confidence struct{ Enum []float64 } `json:"confidence"`
			Urgency    struct{ Enum []string }  `json:"urgency"`
		} `json:"properties"`
		Required             []string `json:"required"`
		AdditionalProperties bool     `json:"additionalProperties"`
	}
	if err := json.Unmarshal(modelspec.SchemaFor(64), &s); err != nil {
		t.Fatalf("schema is not JSON: %v", err)
	}
	if s.Properties.Reason.MaxLength != 64 {
		t.Errorf("reason maxLength = %d, want 64", s.Properties.Reason.MaxLength)
	}
	if n := len(s.Properties.Confidence.Enum); n != 11 || s.Properties.Confidence.Enum[0] != 0 || s.Properties.Confidence.Enum[10] != 1 {
		t.Errorf("confidence enum = %v", s.Properties.Confidence.Enum)
	}
	if len(s.Required) != 4 || s.AdditionalProperties {
		t.Errorf("required = %v, additionalProperties = %v", s.Required, s.AdditionalProperties)
	}
}
