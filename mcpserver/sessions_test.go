package mcpserver

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/memwatch/memwatch/access"
	"github.com/memwatch/memwatch/policy"
)

// syncBuffer is a log both the handler and the test read.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSessionsShare: one client's flood of sessions ends its own oldest
// ones, never another client's, and another client's new session is a
// 200 whatever the flood; a refusal is logged once a minute per client.
func TestSessionsShare(t *testing.T) {
	tr := newTree(t, "mcp: {max_sessions: 8, max_sessions_per_client: 3}\n")
	var logBuf syncBuffer
	s, err := New(Config{Policy: func() *policy.Policy { return tr.policy }, Version: "test"}, slog.New(slog.NewTextHandler(&logBuf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	callers := map[string]*access.Caller{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who := r.Header.Get("X-Test-Client")
		c := callers[who]
		h.ServeHTTP(w, r.WithContext(access.WithCaller(r.Context(), c)))
	}))
	defer srv.Close()
	for _, who := range []string{"alice", "bob", "carol", "dave"} {
		callers[who] = access.Admin(who) // an administrator per name: reaches everything, counted as its name
	}
	post := func(who, sid, body string) (int, string) {
		req, _ := http.NewRequest("POST", srv.URL+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("X-Test-Client", who)
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Mcp-Session-Id")
	}
	initialize := func(who string, i int) (int, string) {
		return post(who, "", fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"%s%d","version":"1"}}}`, who, i))
	}
	ping := func(who, sid string) int {
		code, _ := post(who, sid, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
		return code
	}
	code, bobSID := initialize("bob", 0)
	if code != 200 || bobSID == "" {
		t.Fatalf("bob's session: %d %q", code, bobSID)
	}
	var alice []string
	for i := range 50 {
		code, sid := initialize("alice", i)
		if code != 200 {
			t.Fatalf("alice's session %d: %d", i, code)
		}
		alice = append(alice, sid)
	}
	open := 0
	for _, sid := range alice {
		if ping("alice", sid) == 200 {
			open++
		}
	}
	if open != 3 {
		t.Errorf("alice has %d sessions open of 50, want her share of 3", open)
	}
	if code := ping("bob", bobSID); code != 200 {
		t.Errorf("bob's session after alice's flood: %d, want 200", code)
	}
	if n := strings.Count(logBuf.String(), "client=alice"); n != 1 {
		t.Errorf("alice's 47 evictions were logged in %d lines, want 1:\n%s", n, logBuf.String())
	}
	// The whole bound: alice 3, bob, carol 3; dave gets room (carol and
	// alice hold more than an even share, so one of theirs goes).
	for i := range 3 {
		initialize("carol", i)
	}
	initialize("bob", 1)
	if code, _ := initialize("dave", 0); code != 200 {
		t.Errorf("dave's session with the bound full: %d, want 200", code)
	}
	if code := ping("bob", bobSID); code != 200 {
		t.Errorf("bob's first session after the bound was reached: %d, want 200", code)
	}
}
