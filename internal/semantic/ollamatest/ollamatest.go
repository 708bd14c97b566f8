// Package ollamatest is a fake Ollama server for tests: /api/chat,
// /api/embed, /api/show and /api/tags over httptest, answering like the real server
// (shapes, status codes, error bodies). It checks the shape of every chat
// request lookout sends (model, JSON schema format — a verdict's or a
// digest briefing's —, stream false,
// temperature 0 and a seed, system + user messages) and fails the test on
// a deviation. Answers are canned verdicts by default; a test replaces the
// answer function to return malformed JSON, errors or slow answers.
package ollamatest

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ollama/ollama/api"
)

// Answer is what the fake does with one chat request.
type Answer struct {
	// Content is the assistant message (the model's JSON answer).
	Content string
	// Status, when not 0 or 200, answers with this status and Error.
	Status int
	Error  string
	// Hang blocks until the client gives up (its timeout) or Release is
	// closed.
	Hang bool
	// PromptTokens and OutputTokens are reported in the metrics. Default 50 and 20.
	PromptTokens, OutputTokens int
	// DoneReason is why the model stopped: "length" when num_predict cut
	// the answer short. Default "stop".
	DoneReason string
}

// Verdict returns the answer content for a verdict.
func Verdict(notify bool, urgency, reason string, confidence float64) string {
	b, _ := json.Marshal(map[string]any{"should_notify": notify, "urgency": urgency, "reason": reason, "confidence": confidence})
	return string(b)
}

// Briefing returns the answer content for a fully cited digest briefing:
// a headline citing every cited record and, for each pair of cites, a
// record id and why it matters.
func Briefing(headline string, cites ...[2]string) string {
	ids := []string{}
	for _, c := range cites {
		ids = append(ids, c[0])
	}
	return BriefingCiting(headline, ids, cites...)
}

// BriefingCiting is Briefing with the headline's citations given: none
// makes an uncited headline.
func BriefingCiting(headline string, citations []string, cites ...[2]string) string {
	items := []map[string]string{}
	for _, c := range cites {
		items = append(items, map[string]string{"record_id": c[0], "why_it_matters": c[1]})
	}
	if citations == nil {
		citations = []string{}
	}
	b, _ := json.Marshal(map[string]any{"headline": map[string]any{"text": headline, "citations": citations}, "items": items})
	return string(b)
}

// Review is the content of a review answer (one criterion of a task
// review: pass, comment, score).
func Review(pass bool, score int, comment string) string {
	b, _ := json.Marshal(map[string]any{"pass": pass, "comment": comment, "score": score})
	return string(b)
}

// IsReview reports whether req asks for a task review's criterion.
func IsReview(req *api.ChatRequest) bool {
	return strings.Contains(string(req.Format), `"pass"`)
}

// IsBriefing reports whether req asks for a digest briefing (its format
// is the briefing schema).
func IsBriefing(req *api.ChatRequest) bool {
	return strings.Contains(string(req.Format), `"headline"`)
}

// Server is the fake.
type Server struct {
	*httptest.Server
	t testing.TB

	mu       sync.Mutex
	models   map[string]string // name -> digest
	answer   func(req *api.ChatRequest) Answer
	requests []*api.ChatRequest
	tags     int
	shows    int
	inflight int
	maxIn    int
	release  chan struct{}
	tagsDown bool
	embed    embedState
}

// DefaultAnswer judges by keyword: a user message containing "URGENT"
// should notify with high urgency, anything else should not.
func DefaultAnswer(req *api.ChatRequest) Answer {
	user := ""
	for _, m := range req.Messages {
		if m.Role == "user" {
			user = m.Content
			break
		}
	}
	if strings.Contains(user, "URGENT") {
		return Answer{Content: Verdict(true, "high", "The record is marked urgent.", 0.9)}
	}
	return Answer{Content: Verdict(false, "low", "Nothing here needs the user.", 0.8)}
}

// New starts a fake serving the given models (name -> digest), e.g.
// {"llama3.2:latest": "sha256:aaa"}. It is closed when the test ends.
func New(t testing.TB, models map[string]string) *Server {
	s := &Server{t: t, models: models, answer: DefaultAnswer, release: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/chat", s.chat)
	mux.HandleFunc("POST /api/show", s.show)
	mux.HandleFunc("GET /api/tags", s.list)
	mux.HandleFunc("POST /api/embed", s.embedHandler)
	s.Server = httptest.NewServer(mux)
	t.Cleanup(func() {
		s.Release()
		s.Close()
	})
	return s
}

// SetAnswer replaces the answer function.
func (s *Server) SetAnswer(fn func(req *api.ChatRequest) Answer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answer = fn
}

// Answers answers the next requests in order with as, then DefaultAnswer.
func (s *Server) Answers(as ...Answer) {
	var mu sync.Mutex
	s.SetAnswer(func(req *api.ChatRequest) Answer {
		mu.Lock()
		defer mu.Unlock()
		if len(as) == 0 {
			return DefaultAnswer(req)
		}
		a := as[0]
		as = as[1:]
		return a
	})
}

// SetDigest sets (or adds) a model's digest, as a pull of a new version would.
func (s *Server) SetDigest(model, digest string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.models[model] = digest
}

// TagsDown makes /api/tags answer 500.
func (s *Server) TagsDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tagsDown = down
}

// Release unblocks hanging answers (once).
func (s *Server) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.release:
	default:
		close(s.release)
	}
}

// Requests returns the chat requests received so far.
func (s *Server) Requests() []*api.ChatRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*api.ChatRequest(nil), s.requests...)
}

// Chats is the number of chat requests received.
func (s *Server) Chats() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
}

// TagsCalls is the number of /api/tags requests received.
func (s *Server) TagsCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tags
}

// InFlight returns the chat requests being answered now and the most seen at once.
func (s *Server) InFlight() (now, most int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inflight, s.maxIn
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	var req api.ChatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	s.checkShape(&req)
	s.mu.Lock()
	s.requests = append(s.requests, &req)
	_, known := s.models[qualified(req.Model)]
	answer, release := s.answer, s.release
	s.inflight++
	s.maxIn = max(s.maxIn, s.inflight)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inflight--
		s.mu.Unlock()
	}()
	if !known {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("model %q not found, try pulling it first", req.Model)})
		return
	}
	a := answer(&req)
	if a.Hang {
		select {
		case <-r.Context().Done():
			return
		case <-release:
		}
	}
	if a.Status != 0 && a.Status != http.StatusOK {
		writeJSON(w, a.Status, map[string]string{"error": a.Error})
		return
	}
	resp := api.ChatResponse{
		Model: req.Model, CreatedAt: time.Now().UTC(), Done: true, DoneReason: cmp.Or(a.DoneReason, "stop"),
		Message: api.Message{Role: "assistant", Content: a.Content},
	}
	resp.PromptEvalCount = a.PromptTokens
	if resp.PromptEvalCount == 0 {
		resp.PromptEvalCount = 50
	}
	resp.EvalCount = a.OutputTokens
	if resp.EvalCount == 0 {
		resp.EvalCount = 20
	}
	resp.TotalDuration = 5 * time.Millisecond
	writeJSON(w, http.StatusOK, resp)
}

// checkShape fails the test when a chat request is not what lookout must send.
func (s *Server) checkShape(req *api.ChatRequest) {
	t := s.t
	if req.Model == "" {
		t.Errorf("ollamatest: chat request without a model")
	}
	if req.Stream == nil || *req.Stream {
		t.Errorf("ollamatest: chat request must set stream false")
	}
	var schema struct {
		Type       string                     `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	if err := json.Unmarshal(req.Format, &schema); err != nil || schema.Type != "object" {
		t.Errorf("ollamatest: format must be a JSON schema object, got %s", req.Format)
	}
	want := []string{"should_notify", "urgency", "reason", "confidence"}
	if _, ok := schema.Properties["headline"]; ok {
		want = []string{"headline", "items"} // a briefing
	}
	if _, ok := schema.Properties["pass"]; ok {
		want = []string{"pass", "comment", "score"} // a task review's criterion
	}
	for _, k := range want {
		if _, ok := schema.Properties[k]; !ok {
			t.Errorf("ollamatest: format schema lacks property %q", k)
		}
	}
	if len(schema.Required) != len(want) {
		t.Errorf("ollamatest: format schema must require %d properties, requires %v", len(want), schema.Required)
	}
	if temp, ok := req.Options["temperature"].(float64); !ok || temp != 0 {
		t.Errorf("ollamatest: options.temperature must be 0, got %v", req.Options["temperature"])
	}
	if _, ok := req.Options["seed"].(float64); !ok {
		t.Errorf("ollamatest: options.seed must be set, got %v", req.Options["seed"])
	}
	if len(req.Messages) < 2 || req.Messages[0].Role != "system" || req.Messages[1].Role != "user" {
		t.Errorf("ollamatest: messages must start with system and user, got %d messages", len(req.Messages))
	}
}

func (s *Server) show(w http.ResponseWriter, r *http.Request) {
	var req api.ShowRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	s.mu.Lock()
	s.shows++
	_, known := s.models[qualified(req.Model)]
	s.mu.Unlock()
	if !known {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("model '%s' not found", req.Model)})
		return
	}
	writeJSON(w, http.StatusOK, api.ShowResponse{
		Template: "{{ .Prompt }}",
		Details:  api.ModelDetails{Format: "gguf", Family: "llama", Families: []string{"llama"}, ParameterSize: "1B", QuantizationLevel: "Q4_0"},
	})
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tags++
	if s.tagsDown {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "server busy"})
		return
	}
	var resp api.ListResponse
	for name, digest := range s.models {
		resp.Models = append(resp.Models, api.ListModelResponse{
			Name: name, Model: name, Digest: digest, Size: 1 << 20, ModifiedAt: time.Now().UTC(),
			Details: api.ModelDetails{Format: "gguf", Family: "llama"},
		})
	}
	writeJSON(w, http.StatusOK, resp)
}

func qualified(name string) string {
	i := strings.LastIndex(name, "/")
	if !strings.Contains(name[i+1:], ":") {
		return name + ":latest"
	}
	return name
}
