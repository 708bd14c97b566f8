package ollamatest

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"strings"
	"time"
	"unicode"
)

// EmbedDims is the length of the fake's embeddings.
const EmbedDims = 64

// embedState is the fake's /api/embed state.
type embedState struct {
	status int    // when not 0, answers this status
	errMsg string // with this error
	calls  int    // requests received
	inputs int    // inputs embedded (answered 200)
}

// EmbedDown makes /api/embed answer status with an error body, as a
// server that is down behind a proxy (502, 503) or overloaded would; 0
// makes it answer again.
func (s *Server) EmbedDown(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.embed.status, s.embed.errMsg = status, "server unavailable"
}

// EmbedCalls returns the /api/embed requests received and the inputs
// embedded by the ones answered.
func (s *Server) EmbedCalls() (requests, inputs int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.embed.calls, s.embed.inputs
}

// Embedding is the fake's embedding of text: its words hashed into
// EmbedDims buckets (a bag of words), L2-normalized as Ollama's
// /api/embed returns them. Texts about the same words are close; texts
// about other words are far.
func Embedding(text string) []float32 {
	v := make([]float64, EmbedDims)
	for _, w := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		if len(w) < 3 {
			continue
		}
		h := fnv.New32a()
		_, _ = h.Write([]byte(w))
		v[h.Sum32()%EmbedDims]++
	}
	var n float64
	for _, x := range v {
		n += x * x
	}
	n = math.Sqrt(n)
	out := make([]float32, EmbedDims)
	for i, x := range v {
		if n > 0 {
			out[i] = float32(x / n)
		}
	}
	return out
}

// embedHandler answers POST /api/embed like Ollama: {"model", "input":
// a string or a list of strings} → {"model", "embeddings": [[...]]}; an
// unknown model is a 404 with Ollama's error text.
func (s *Server) embedHandler(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model string          `json:"model"`
		Input json.RawMessage `json:"input"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	var inputs []string
	var one string
	if err := json.Unmarshal(req.Input, &one); err == nil {
		inputs = []string{one}
	} else if err := json.Unmarshal(req.Input, &inputs); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid input type"})
		return
	}
	s.mu.Lock()
	s.embed.calls++
	status, msg := s.embed.status, s.embed.errMsg
	_, known := s.models[qualified(req.Model)]
	if status == 0 && known {
		s.embed.inputs += len(inputs)
	}
	s.mu.Unlock()
	if status != 0 {
		writeJSON(w, status, map[string]string{"error": msg})
		return
	}
	if req.Model == "" {
		s.t.Errorf("ollamatest: embed request without a model")
	}
	if !known {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("model %q not found, try pulling it first", req.Model)})
		return
	}
	embs := make([][]float32, len(inputs))
	for i, in := range inputs {
		embs[i] = Embedding(in)
	}
	writeJSON(w, http.StatusOK, map[string]any{"model": req.Model, "embeddings": embs,
		"total_duration": int64(3 * time.Millisecond), "prompt_eval_count": 8 * len(inputs)})
}
