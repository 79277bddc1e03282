// Package llmtest is a scripted OpenAI-compatible chat completions server
// for tests: a real HTTP server (httptest) that answers each call with the
// next scripted step: content, latency, 429 with Retry-After, 5xx, malformed
// bodies, truncated output, or a hang.
package llmtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// Step is the scripted answer to one call.
type Step struct {
	Status       int           // HTTP status, default 200
	Content      string        // the assistant message
	RetryAfter   string        // Retry-After header value
	Delay        time.Duration // wait before answering
	Hang         bool          // never answer (until the client gives up)
	Raw          string        // a raw response body instead of a completion
	FinishReason string        // default "stop"; "length" for truncated output
	Tokens       int           // usage.total_tokens, default 100

	// Wait, when set, holds the answer until it is closed (or the client
	// gives up): a test decides when the call ends, no delay guessed.
	Wait <-chan struct{}
}

// Server is the fake endpoint. Its URL plus "/v1" is the base_url.
type Server struct {
	*httptest.Server
	mu       sync.Mutex
	steps    []Step
	fallback *Step
	requests []openai.ChatCompletionRequest
	headers  []http.Header
	active   int
	peak     int
}

// PeakConcurrency is the most requests that were in flight at once.
func (s *Server) PeakConcurrency() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// New starts a server answering with steps in order, then with the last
// step forever (or 500 when there were none). It stops at test cleanup.
func New(t testing.TB, steps ...Step) *Server {
	s := &Server{steps: steps}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// BaseURL is the value for a policy's base_url.
func (s *Server) BaseURL() string { return s.URL + "/v1" }

// Calls is how many requests arrived.
func (s *Server) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
}

// Requests returns every request received.
func (s *Server) Requests() []openai.ChatCompletionRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]openai.ChatCompletionRequest(nil), s.requests...)
}

// Headers returns the headers of every request received.
func (s *Server) Headers() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header(nil), s.headers...)
}

func (s *Server) next() Step {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.steps) > 0 {
		st := s.steps[0]
		s.steps = s.steps[1:]
		s.fallback = &st
		return st
	}
	if s.fallback != nil {
		return *s.fallback
	}
	return Step{Status: 500, Raw: `{"error":{"message":"no scripted response"}}`}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	var req openai.ChatCompletionRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, req)
	s.headers = append(s.headers, r.Header.Clone())
	s.active++
	s.peak = max(s.peak, s.active)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.active--
		s.mu.Unlock()
	}()
	st := s.next()
	if st.Hang {
		<-r.Context().Done()
		return
	}
	if st.Wait != nil {
		select {
		case <-st.Wait:
		case <-r.Context().Done():
			return
		}
	}
	if st.Delay > 0 {
		select {
		case <-time.After(st.Delay):
		case <-r.Context().Done():
			return
		}
	}
	if st.RetryAfter != "" {
		w.Header().Set("Retry-After", st.RetryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	status := st.Status
	if status == 0 {
		status = 200
	}
	if st.Raw != "" || status != 200 {
		w.WriteHeader(status)
		body := st.Raw
		if body == "" {
			body = fmt.Sprintf(`{"error":{"message":"scripted HTTP %d","type":"server_error"}}`, status)
		}
		fmt.Fprint(w, body)
		return
	}
	tokens := st.Tokens
	if tokens == 0 {
		tokens = 100
	}
	finish := st.FinishReason
	if finish == "" {
		finish = "stop"
	}
	resp := map[string]any{
		"id": "chatcmpl-test", "object": "chat.completion", "created": time.Now().Unix(), "model": req.Model,
		"choices": []map[string]any{{"index": 0, "message": map[string]string{"role": "assistant", "content": st.Content}, "finish_reason": finish}},
		"usage":   map[string]int{"prompt_tokens": tokens * 3 / 4, "completion_tokens": tokens - tokens*3/4, "total_tokens": tokens},
	}
	json.NewEncoder(w).Encode(resp)
}
