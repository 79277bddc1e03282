package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/memwatch/memwatch/compact/llmtest"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/secrets"
	"github.com/memwatch/memwatch/state"
)

// credentials are values of many kinds, made up in their real shapes (as
// the secrets package's tests hold them).
var credentials = []struct{ kind, line, value string }{
	{"aws-access-token", "AWS_ACCESS_KEY_ID=AKIAQYLPMN5HFIQR7XQZ", "AKIAQYLPMN5HFIQR7XQZ"},
	{"github-pat", "export GITHUB_TOKEN=ghp_R3vQy8NcLkZt0WmPb2XsJd7HfAe5Ug9KiOqY", "ghp_R3vQy8NcLkZt0WmPb2XsJd7HfAe5Ug9KiOqY"},
	{"gitlab-pat", "token: glpat-Xk3Rv9QmZ2Tn8Wb5Yc4J", "glpat-Xk3Rv9QmZ2Tn8Wb5Yc4J"},
	{"slack-bot-token", "SLACK_BOT_TOKEN=xoxb-2839471625-4820193847562-Qx7RmZk2Vt9NbWc4Lp8Jd3Hs", "xoxb-2839471625-4820193847562-Qx7RmZk2Vt9NbWc4Lp8Jd3Hs"},
	{"stripe-access-token", "stripe.api_key = sk_live_51Hx9QmZ2Tn8Wb5Yc4JvR7kLpQ", "sk_live_51Hx9QmZ2Tn8Wb5Yc4JvR7kLpQ"},
	{"gcp-api-key", "key=AIzaSyD3kQ8vRm2Tn9WxB4Lp7Zc5Yh1Jf6Gs0Qe", "AIzaSyD3kQ8vRm2Tn9WxB4Lp7Zc5Yh1Jf6Gs0Qe"},
	{"npm-access-token", "//registry.npmjs.org/:_authToken=npm_Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kLpQxZ2Tn8Wb5", "npm_Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kLpQxZ2Tn8Wb5"},
	{"sendgrid-api-token", "SENDGRID_API_KEY=SG.Xk3Rv9QmZ2Tn8Wb5Yc4JvR.7kLpQxZ2Tn8Wb5Yc4JvR7kLpQxZ2Tn8Wb5Yc4JvR7kL", "SG.Xk3Rv9QmZ2Tn8Wb5Yc4JvR.7kLpQxZ2Tn8Wb5Yc4JvR7kLpQxZ2Tn8Wb5Yc4JvR7kL"},
	{"huggingface-access-token", "HF_TOKEN=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", "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"},
	{"database-url-password", "DATABASE_URL=postgres://billing:Tr0ub4dor-3x@db.internal:5432/billing", "Tr0ub4dor-3x"},
	{"twilio-api-key", "TWILIO_KEY=SK3f9b2c7d1e8a4f6b0c5d9e2a7f1b3c8d", "SK3f9b2c7d1e8a4f6b0c5d9e2a7f1b3c8d"},
	{"digitalocean-pat", "DO_TOKEN=dop_v1_3f9b2c7d1e8a4f6b0c5d9e2a7f1b3c8d3f9b2c7d1e8a4f6b0c5d9e2a7f1b3c8d", "dop_v1_3f9b2c7d1e8a4f6b0c5d9e2a7f1b3c8d3f9b2c7d1e8a4f6b0c5d9e2a7f1b3c8d"},
}

// splitCredential is a name and its value on two lines, as YAML and
// configs print them: the value is a credential to gitleaks' catch-all
// rule once the line's text is read (it was shown in the clear).
const splitCredential, splitValue = "okapi_secret\n= Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq", "Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq"

// TestSecretsNeverLeave: a session's tool output holds credentials of 12
// kinds (and a name and its value on two lines), the assistant repeats
// two, and the fake LLM endpoint's answer repeats three. None of the
// values goes to the endpoint or into HISTORY.md or MEMORY.md, the log or
// the journal, recall, show or MCP recall_memory; the agent's own file is
// as it wrote it; show --reveal gives its owner a value; the masks name
// the kinds.
func TestSecretsNeverLeave(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "ws", "a")
	os.MkdirAll(filepath.Join(root, "sessions"), 0o755)
	var env strings.Builder
	for _, c := range credentials {
		env.WriteString(c.line + "\n")
	}
	line := func(role string, content any) string {
		b, _ := json.Marshal(map[string]any{"role": role, "content": content, "timestamp": "2026-11-20T10:00:00Z"})
		return string(b) + "\n"
	}
	session := line("user", "why does the okapi deploy fail?") +
		line("assistant", "Let me read the env file for the okapi deploy.") +
		line("tool", "cat .env\n"+env.String()) +
		line("assistant", fmt.Sprintf("The okapi deploy uses %s and %s; the database password is wrong.", credentials[0].value, credentials[1].value)) +
		line("tool", "cat okapi.yaml\n"+splitCredential+"\n")
	logPath := filepath.Join(root, "sessions", "s1.jsonl")
	os.WriteFile(logPath, []byte(session), 0o600)
	answer, _ := json.Marshal(map[string]string{
		"history_entry": fmt.Sprintf("[2026-11-20 10:00] Debugged the okapi deploy; keys %s %s %s.", credentials[2].value, credentials[3].value, credentials[9].value),
		"memory_update": fmt.Sprintf("# Memory\n- the okapi deploy key is %s\n", credentials[5].value),
	})
	srv := llmtest.New(t, llmtest.Step{Content: string(answer), Tokens: 200})
	stateDir := filepath.Join(dir, "state")
	pol := writePolicy(t, dir, fmt.Sprintf(`llm:
  default:
    base_url: %s
    model: fake
    timeout: 5s
stores:
  - name: ws
    layout: memory-history
    paths: [%q]
    compactor: llm
    settle: 30ms
    session_idle: 1s
`, srv.BaseURL(), filepath.Join(dir, "ws", "*")))
	p := start(t, "--policy", pol, "--state-dir", stateDir)
	waitUntil(t, 30*time.Second, func() bool {
		b, _ := os.ReadFile(filepath.Join(root, "HISTORY.md"))
		return strings.Contains(string(b), "okapi deploy")
	})
	leaks := func(what, s string) {
		t.Helper()
		for _, c := range credentials {
			if strings.Contains(s, c.value) {
				t.Errorf("%s holds the %s value:\n%s", what, c.kind, s[:min(len(s), 2000)])
			}
		}
		if strings.Contains(s, splitValue) {
			t.Errorf("%s holds the value given on the line after its name:\n%s", what, s[:min(len(s), 2000)])
		}
	}
	for i, r := range srv.Requests() {
		b, _ := json.Marshal(r)
		leaks(fmt.Sprintf("LLM request %d", i), string(b))
	}
	if srv.Calls() == 0 {
		t.Fatal("the LLM was never asked")
	}
	for _, name := range []string{"HISTORY.md", "MEMORY.md"} {
		b, _ := os.ReadFile(filepath.Join(root, name))
		leaks(name, string(b))
	}
	if b, _ := os.ReadFile(filepath.Join(root, "HISTORY.md")); !strings.Contains(string(b), "[REDACTED:gitlab-pat]") {
		t.Errorf("HISTORY.md does not name the kind it masked:\n%s", b)
	}
	if got, _ := os.ReadFile(logPath); string(got) != session {
		t.Errorf("the agent's session file changed")
	}
	run := func(args ...string) string {
		out, _ := exec.Command(memwatchFast, args...).CombinedOutput()
		return string(out)
	}
	out := run("recall", "--policy", pol, "--state-dir", stateDir, "--dir", root, "--limit", "20", "-C", "2", "okapi")
	leaks("recall", out)
	if !strings.Contains(out, "[REDACTED:aws-access-token]") {
		t.Errorf("recall does not name the kind it masked:\n%s", out)
	}
	leaks("recall of a value", run("recall", "--policy", pol, "--state-dir", stateDir, "--dir", root, credentials[4].value))
	leaks("show", run("show", "--policy", pol, "--state-dir", stateDir, "--dir", root, "sessions/s1.jsonl#L1-4"))
	leaks("show --raw", run("show", "--policy", pol, "--state-dir", stateDir, "--dir", root, "--raw", "sessions/s1.jsonl#L3"))
	leaks("show --raw of the two lines", run("show", "--policy", pol, "--state-dir", stateDir, "--dir", root, "--raw", "sessions/s1.jsonl#L5"))
	if out := run("recall", "--policy", pol, "--state-dir", stateDir, "--dir", root, "okapi.yaml"); !strings.Contains(out, "s1.jsonl#L5") || !strings.Contains(out, "[REDACTED:generic-api-key]") {
		t.Errorf("recall of the value given on the line after its name: want its line, masked:\n%s", out)
	}
	if out := run("show", "--policy", pol, "--state-dir", stateDir, "--dir", root, "--reveal", "sessions/s1.jsonl#L3"); !strings.Contains(out, credentials[0].value) {
		t.Errorf("show --reveal does not give the owner the value:\n%s", out)
	}
	leaks("the journal", run("log", "--policy", pol, "--state-dir", stateDir, "--json", "-n", "1000"))
	cmd := exec.Command(memwatchBin, "mcp", "--policy", pol, "--state-dir", stateDir, "--root", root)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for _, tool := range []struct {
		name string
		args map[string]any
	}{{"recall_memory", map[string]any{"query": "okapi deploy env", "limit": 20}}, {"recall_show", map[string]any{"citation": "sessions/s1.jsonl#L3"}}} {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool.name, Arguments: tool.args})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(res)
		leaks("MCP "+tool.name, string(b))
	}
	leaks("the log", p.text())
}

// TestSecretsCommand: a Claude Code home (the policy init writes) whose
// transcript's tool output holds credentials of 12 kinds: memwatch
// secrets names each kind with its file and line, prints no value, exits
// 1; a home of plain conversations: no finding, exit 0.
func TestSecretsCommand(t *testing.T) {
	home, _, root := claudeHome(t)
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if out, err := exec.Command(memwatchFast, "init", "--home", home, "--write", pol).CombinedOutput(); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	secretsOf := func() (string, int) {
		cmd := exec.Command(memwatchFast, "secrets", "--policy", pol, "--state-dir", filepath.Join(home, "state"))
		out, err := cmd.CombinedOutput()
		return string(out), exitCode(err)
	}
	if out, code := secretsOf(); code != 0 || !strings.Contains(out, "no credential found") {
		t.Errorf("a home of plain conversations: exit %d\n%s", code, out)
	}
	catEnv(root)
	out, code := secretsOf()
	if code != 1 {
		t.Errorf("credentials found: exit %d, want 1\n%s", code, out)
	}
	for _, c := range credentials {
		if !strings.Contains(out, c.kind) {
			t.Errorf("%s is not named:\n%s", c.kind, out)
		}
		if strings.Contains(out, c.value) {
			t.Errorf("the %s value is printed:\n%s", c.kind, out)
		}
	}
	if !strings.Contains(out, "7d3a-env.jsonl#L1") {
		t.Errorf("no file and line:\n%s", out)
	}
	// Values the JSON line escapes around (a quoted .env value, a JSON
	// config, a tab): counted as the agent's reader reads the line.
	for i, text := range []string{`OKAPI_SECRET="Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq"`, `{"api_key": "Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq"}`, "password:\tXk3Rv9QmZ2Tn8Wb5Yc4JvR7kq"} {
		tool, _ := json.Marshal(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": []map[string]any{{"type": "tool_result", "tool_use_id": "t1", "content": "cat config\n" + text + "\n"}}}})
		name := fmt.Sprintf("9e1f-escaped%d.jsonl", i)
		os.WriteFile(filepath.Join(root, name), append(tool, '\n'), 0o644)
		if out, code := secretsOf(); code != 1 || !strings.Contains(out, name+"#L1") || strings.Contains(out, "Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kq") {
			t.Errorf("%q in a tool result: exit %d, want %s#L1 named, the value not printed\n%s", text, code, name, out)
		}
	}
	// A kind's name finds the lines that hold one, the value masked.
	for _, c := range credentials[:3] {
		cmd := exec.Command(memwatchFast, "recall", "--all", c.kind, "--policy", pol, "--state-dir", filepath.Join(home, "state"))
		got, err := cmd.CombinedOutput()
		if code := exitCode(err); code != 0 || !strings.Contains(string(got), "7d3a-env.jsonl#L") || !strings.Contains(string(got), secrets.MaskOf(c.kind)) || strings.Contains(string(got), c.value) {
			t.Errorf("recall --all %s: exit %d\n%s\nwant the line holding one, masked", c.kind, code, got)
		}
	}
}

// TestStatusCountsSecrets: once caught up, the daemon's status (and the
// overview page) says how many credentials of which kinds the agents'
// memory holds, never a value, so a person knows to rotate them.
func TestStatusCountsSecrets(t *testing.T) {
	t.Parallel()
	home, _, root := claudeHome(t)
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if out, err := exec.Command(memwatchFast, "init", "--home", home, "--write", pol).CombinedOutput(); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	catEnv(root)
	state := filepath.Join(home, "state")
	p := start(t, "--policy", pol, "--state-dir", state)
	p.waitLog("ready", 10*time.Second)
	var st control.Status
	waitUntil(t, 20*time.Second, func() bool {
		out, err := exec.Command(memwatchFast, "status", "--json", "--policy", pol, "--state-dir", state).Output()
		st = control.Status{}
		return err == nil && json.Unmarshal(out, &st) == nil && st.Secrets != nil
	})
	if st.Secrets == nil || st.Secrets.Found < len(credentials) {
		t.Fatalf("status secrets: %+v, want at least %d found", st.Secrets, len(credentials))
	}
	for _, c := range credentials {
		if st.Secrets.Kinds[c.kind] == 0 {
			t.Errorf("status does not count %s: %v", c.kind, st.Secrets.Kinds)
		}
	}
	out, _ := exec.Command(memwatchFast, "status", "--policy", pol, "--state-dir", state).CombinedOutput()
	if !strings.Contains(string(out), "credentials: ") || !strings.Contains(string(out), "memwatch secrets") {
		t.Errorf("status text says nothing of the credentials:\n%s", out)
	}
	for _, c := range credentials {
		if strings.Contains(string(out), c.value) {
			t.Errorf("status prints the %s value", c.kind)
		}
	}
}

// countedHome is a Claude Code home (claudeHome, catEnv: every credential
// in one session), the policy init writes for it and a state directory;
// found is status's count of credentials, counted what the daemon p's
// count said it read (a field of its log line, once it has counted).
func countedHome(t *testing.T) (home, root, pol, state string, found func() int, counted func(p *proc, field string) int64) {
	t.Helper()
	home, _, root = claudeHome(t)
	catEnv(root)
	pol = filepath.Join(t.TempDir(), "policy.yaml")
	if out, err := exec.Command(memwatchFast, "init", "--home", home, "--write", pol).CombinedOutput(); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	state = filepath.Join(home, "state")
	found = func() int { t.Helper(); return statusFound(t, pol, state) }
	counted = func(p *proc, field string) int64 {
		t.Helper()
		l := p.waitLog("counted the credentials in the agents' memory", 30*time.Second)
		n, _ := l[field].(float64)
		return int64(n)
	}
	return home, root, pol, state, found, counted
}

// secretsListed is what memwatch secrets --json lists, a finding's kind
// and citation a line, sorted.
func secretsListed(t *testing.T, pol, state string) []string {
	t.Helper()
	out, _ := exec.Command(memwatchFast, "secrets", "--json", "--policy", pol, "--state-dir", state).Output()
	var fs []struct{ Kind, Citation string }
	if err := json.Unmarshal(out, &fs); err != nil {
		t.Fatalf("secrets --json: %v\n%s", err, out)
	}
	var got []string
	for _, f := range fs {
		got = append(got, f.Kind+" "+f.Citation)
	}
	slices.Sort(got)
	return got
}

// appendKey appends to a session, as the agent does, a turn holding one
// credential.
func appendKey(t *testing.T, session string) {
	t.Helper()
	f, err := os.OpenFile(session, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(`{"type":"assistant","message":{"role":"assistant","content":"Set it: export OPENAI_KEY=sk-proj-Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kLpQxT3BlbkFJXk3Rv9QmZ2Tn8Wb5Yc4J"}}` + "\n"); err != nil {
		t.Fatal(err)
	}
}

// statusFound is how many credentials memwatch status counts.
func statusFound(t *testing.T, pol, state string) int {
	t.Helper()
	out, err := exec.Command(memwatchFast, "status", "--json", "--policy", pol, "--state-dir", state).Output()
	var st control.Status
	if err != nil || json.Unmarshal(out, &st) != nil || st.Secrets == nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	return st.Secrets.Found
}

// TestCountReadsWhatWasAppended: the daemon's count of credentials reads
// a session once; at the next start, after the agent appended a turn
// holding one more, it reads only that turn and counts one more.
func TestCountReadsWhatWasAppended(t *testing.T) {
	t.Parallel()
	_, root, pol, state, found, counted := countedHome(t)
	session := filepath.Join(root, "7d3a-env.jsonl")
	bytesRead := func(p *proc) int64 { return counted(p, "bytes") }

	p := start(t, "--policy", pol, "--state-dir", state)
	fi, _ := os.Stat(session)
	if got := bytesRead(p); got < fi.Size() {
		t.Errorf("first count read %d bytes, want the whole session's %d at least", got, fi.Size())
	}
	before := found()
	if err := p.stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}

	turn, _ := json.Marshal(map[string]any{"type": "assistant", "message": map[string]any{"role": "assistant", "content": []map[string]any{{"type": "text", "text": "Set it: export OPENAI_KEY=sk-proj-Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kLpQxT3BlbkFJXk3Rv9QmZ2Tn8Wb5Yc4J"}}}})
	turn = append(turn, '\n')
	f, err := os.OpenFile(session, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(turn)
	f.Close()

	p = start(t, "--policy", pol, "--state-dir", state)
	if got, want := bytesRead(p), int64(len(turn)); got != want {
		t.Errorf("the count after a turn appended read %d bytes, want the turn's %d", got, want)
	}
	if got := found(); got != before+1 {
		t.Errorf("status counts %d credentials, want %d (one more)", got, before+1)
	}
}

// TestStatusCountsWhatWasJustWritten: a credential an agent writes while
// the daemon runs is in status's count within a minute or so, not at the
// next hourly count.
func TestStatusCountsWhatWasJustWritten(t *testing.T) {
	t.Parallel()
	_, root, pol, state, found, counted := countedHome(t)
	p := start(t, "--policy", pol, "--state-dir", state)
	counted(p, "bytes")
	before := found()
	appendKey(t, filepath.Join(root, "7d3a-env.jsonl"))
	waitUntil(t, 90*time.Second, func() bool { return found() == before+1 })
	if got := found(); got != before+1 {
		t.Errorf("status counts %d credentials 90 s after one more was written, want %d", got, before+1)
	}
}

// TestStatusKeepsWhatADeletedSessionHeld: a session the agent deletes
// leaves the file but not memwatch (the spool holds its lines): status
// still counts its credentials once the watcher's pass counted the
// root again, beside one just written into another session.
func TestStatusKeepsWhatADeletedSessionHeld(t *testing.T) {
	t.Parallel()
	_, root, pol, state, found, counted := countedHome(t)
	other := filepath.Join(root, "9b1e-work.jsonl")
	os.WriteFile(other, []byte(`{"type":"user","message":{"role":"user","content":"nothing secret here"}}`+"\n"), 0o644)
	p := start(t, "--policy", pol, "--state-dir", state)
	counted(p, "bytes")
	before := found()
	if before == 0 {
		t.Fatal("status counts no credential in the session to delete")
	}
	if err := os.Remove(filepath.Join(root, "7d3a-env.jsonl")); err != nil {
		t.Fatal(err)
	}
	appendKey(t, other)
	waitUntil(t, 90*time.Second, func() bool { return found() == before+1 })
	if got := found(); got != before+1 {
		t.Errorf("status counts %d credentials 90 s after a session holding %d was deleted and one more was written elsewhere, want %d", got, before, before+1)
	}
}

// TestStatusKeepsWhatManyDeletedSessionsHeld: more sessions deleted at
// once than are read a query each (one pass over the project's held
// lines reads them): status counts the credentials they held, each once.
func TestStatusKeepsWhatManyDeletedSessionsHeld(t *testing.T) {
	t.Parallel()
	_, root, pol, state, found, counted := countedHome(t)
	const n = 80
	for i := range n {
		line := fmt.Sprintf(`{"type":"assistant","message":{"role":"assistant","content":"Set it: export OPENAI_KEY=sk-proj-Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kLpQxT3BlbkFJXk3Rv9QmZ2Tn8W%04d"}}`, i)
		os.WriteFile(filepath.Join(root, fmt.Sprintf("%04d-many.jsonl", i)), []byte(line+"\n"), 0o644)
	}
	p := start(t, "--policy", pol, "--state-dir", state)
	counted(p, "bytes")
	before := found()
	if before < n {
		t.Fatalf("status counts %d credentials, want %d at least", before, n)
	}
	if err := p.stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	// Deleted while memwatch was stopped: the next start finds them all
	// gone at once.
	for i := range n {
		os.Remove(filepath.Join(root, fmt.Sprintf("%04d-many.jsonl", i)))
	}
	p = start(t, "--policy", pol, "--state-dir", state)
	if held := counted(p, "held_lines_read"); held != n {
		t.Errorf("the count after the deletions read %d held lines, want %d", held, n)
	}
	if got := found(); got != before {
		t.Errorf("status counts %d credentials after %d sessions holding one each were deleted, want %d", got, n, before)
	}
}

// TestCountKeepsHeldCounts: a session the agent deleted is counted from
// the spool once; later counts, after the agent wrote to another session
// of the project, read none of its lines again and still count it.
func TestCountKeepsHeldCounts(t *testing.T) {
	t.Parallel()
	_, root, pol, state, found, counted := countedHome(t)
	other := filepath.Join(root, "9b1e-work.jsonl")
	turn := func(text string) []byte {
		b, _ := json.Marshal(map[string]any{"type": "assistant", "message": map[string]any{"role": "assistant", "content": []map[string]any{{"type": "text", "text": text}}}})
		return append(b, '\n')
	}
	os.WriteFile(other, turn("nothing secret here"), 0o644)
	heldRead := func(p *proc) int { return int(counted(p, "held_lines_read")) }
	run := func(change func()) (held, n int) {
		change()
		p := start(t, "--policy", pol, "--state-dir", state)
		held, n = heldRead(p), found()
		if err := p.stop(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		return held, n
	}

	_, all := run(func() {})
	held, n := run(func() { os.Remove(filepath.Join(root, "7d3a-env.jsonl")) })
	if held == 0 || n != all {
		t.Errorf("after the session was deleted: %d held lines read, %d credentials counted; want some read, %d counted", held, n, all)
	}
	held, n = run(func() {
		f, _ := os.OpenFile(other, os.O_APPEND|os.O_WRONLY, 0)
		f.Write(turn("still nothing"))
		f.Close()
	})
	if held != 0 || n != all {
		t.Errorf("after another session grew: %d held lines read, %d credentials counted; want none read, %d counted", held, n, all)
	}
}

// TestSecretsReadsWhatTheTallyCannotVouchFor: memwatch secrets lists the
// same credentials with the daemon's tally as without it (it skips only
// the files the tally counted none in, unchanged since), and a file that
// had none when counted and was written since is read.
func TestSecretsReadsWhatTheTallyCannotVouchFor(t *testing.T) {
	t.Parallel()
	_, root, pol, state, _, counted := countedHome(t)
	clean := filepath.Join(root, "2c4d-clean.jsonl")
	os.WriteFile(clean, []byte(`{"type":"user","message":{"role":"user","content":"nothing to hide"}}`+"\n"), 0o644)
	p := start(t, "--policy", pol, "--state-dir", state)
	counted(p, "bytes")
	if err := p.stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	list := func() []string { return secretsListed(t, pol, state) }
	withTally := list()
	tally := filepath.Join(state, "secrets-tally.json")
	kept, err := os.ReadFile(tally)
	if err != nil {
		t.Fatalf("the daemon kept no tally: %v", err)
	}
	os.Remove(tally)
	if without := list(); !slices.Equal(withTally, without) || len(without) < len(credentials) {
		t.Fatalf("with the tally:\n%s\nwithout:\n%s", strings.Join(withTally, "\n"), strings.Join(without, "\n"))
	}
	os.WriteFile(tally, kept, 0o600)
	f, _ := os.OpenFile(clean, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"type":"assistant","message":{"role":"assistant","content":"export GITHUB_TOKEN=ghp_R3vQy8NcLkZt0WmPb2XsJd7HfAe5Ug9KiOqY"}}` + "\n")
	f.Close()
	if got := list(); len(got) != len(withTally)+1 || !strings.Contains(strings.Join(got, "\n"), "2c4d-clean.jsonl#L2") {
		t.Errorf("after a credential was written where the tally counted none:\n%s", strings.Join(got, "\n"))
	}
}

// catEnv writes a Claude Code session whose tool result is a .env holding
// every credential of credentials, as 7d3a-env.jsonl in root.
func catEnv(root string) {
	var env strings.Builder
	for _, c := range credentials {
		env.WriteString(c.line + "\n")
	}
	tool, _ := json.Marshal(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": []map[string]any{{"type": "tool_result", "tool_use_id": "t1", "content": "cat .env\n" + env.String()}}}})
	os.WriteFile(filepath.Join(root, "7d3a-env.jsonl"), append(tool, '\n'), 0o644)
}

// TestScrubSecrets: with scrub_secrets, an idle Claude Code transcript
// holding credentials is masked in the agent's own file (each line still
// parses), in the spool (show --reveal of the line as first captured
// gives no value) and journaled by kind with nothing to undo to; an agent
// appending lines meanwhile (O_APPEND, a file opened per line, some lines
// holding a new token) loses none of them.
func TestScrubSecrets(t *testing.T) {
	t.Parallel()
	home, _, root := claudeHome(t)
	catEnv(root)
	stateDir := filepath.Join(t.TempDir(), "state")
	pol := writePolicy(t, t.TempDir(), fmt.Sprintf("stores:\n  - name: cc\n    preset: claude-code\n    paths: [%q]\n    scrub_secrets: true\n    session_idle: 1s\n    settle: 50ms\n",
		filepath.Join(home, ".claude", "projects", "*")))
	p := start(t, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("ready", 15*time.Second)
	logPath := filepath.Join(root, "7d3a-env.jsonl")

	// The agent: bursts of lines, a pause (the log goes idle, the scrub
	// runs), more lines; every third holds a token of its own.
	const writes = 30
	var tokens []string
	done := make(chan error, 1)
	go func() {
		for i := range writes {
			text := fmt.Sprintf("writer line %d", i)
			if i%3 == 0 {
				// Of a real token's entropy (gitleaks' rule asks for it).
				sum := sha256.Sum256([]byte(fmt.Sprint("token", i)))
				tok := "ghp_" + strings.NewReplacer("+", "x", "/", "y", "=", "").Replace(base64.StdEncoding.EncodeToString(sum[:]))[:36]
				tokens = append(tokens, tok)
				text += " GITHUB_TOKEN=" + tok
			}
			b, _ := json.Marshal(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": text}, "uuid": fmt.Sprintf("w%d", i)})
			f, err := os.OpenFile(logPath, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				done <- err
				return
			}
			_, err = f.Write(append(b, '\n'))
			f.Close()
			if err != nil {
				done <- err
				return
			}
			if i%5 == 4 {
				time.Sleep(1500 * time.Millisecond)
			} else {
				time.Sleep(50 * time.Millisecond)
			}
		}
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	values := func(b []byte) []string {
		var in []string
		for _, c := range credentials {
			if strings.Contains(string(b), c.value) {
				in = append(in, c.kind)
			}
		}
		for _, tok := range tokens {
			if strings.Contains(string(b), tok) {
				in = append(in, tok)
			}
		}
		return in
	}
	var live []byte
	waitUntil(t, 30*time.Second, func() bool { live, _ = os.ReadFile(logPath); return len(values(live)) == 0 })
	if v := values(live); len(v) > 0 {
		t.Fatalf("values still in the agent's file: %v", v)
	}
	lines := strings.Split(strings.TrimSuffix(string(live), "\n"), "\n")
	for i, l := range lines {
		if !json.Valid([]byte(l)) {
			t.Errorf("L%d no longer parses: %.120q", i+1, l)
		}
	}
	for i := range writes {
		if !strings.Contains(string(live), fmt.Sprintf(`"writer line %d`, i)) {
			t.Errorf("the agent's line %d is not in its file", i)
		}
	}
	if !strings.Contains(string(live), secrets.MaskOf("aws-access-token")) || !strings.Contains(string(live), secrets.MaskOf("github-pat")) {
		t.Errorf("no mask names the kinds:\n%.400s", live)
	}

	cli := func(args ...string) (string, int) {
		out, err := exec.Command(memwatchBin, append(args, "--policy", pol, "--state-dir", stateDir)...).CombinedOutput()
		return string(out), exitCode(err)
	}
	// The spool: the line as first captured holds no value any more.
	if out, _ := cli("show", "--reveal", "--dir", root, "7d3a-env.jsonl@1#L1"); len(values([]byte(out))) > 0 || !strings.Contains(out, "REDACTED") {
		t.Errorf("show --reveal of the first capture after the scrub:\n%.600s\nwant masks, no value", out)
	}
	out, _ := cli("log", "--json", "--rule", "scrub-secrets")
	var recs []state.Record
	json.Unmarshal([]byte(out), &recs)
	if len(recs) == 0 || !strings.Contains(recs[len(recs)-1].Reason, "aws-access-token x1") || recs[len(recs)-1].Archive != "" {
		t.Fatalf("scrub records: %s\nwant one naming the kinds, with no archive", out)
	}
	if len(values([]byte(out))) > 0 {
		t.Errorf("the journal holds a value")
	}
	if out, code := cli("undo", fmt.Sprint(recs[0].ID)); code == 0 || !strings.Contains(out, "cannot be undone") {
		t.Errorf("undo of a scrub: exit %d\n%s\nwant a refusal saying why", code, out)
	}
}

// TestSecretsReadsHeldLinesTheTallyCannotVouchFor: of the spool's lines of
// deleted sessions, memwatch secrets reads those of the logs the daemon's
// tally did not count none in, as they are now: the list is the same with
// the tally as without; a log the tally says holds none (here, falsely,
// to see it is not read) is not read; one whose stamp changed since is.
func TestSecretsReadsHeldLinesTheTallyCannotVouchFor(t *testing.T) {
	t.Parallel()
	_, root, pol, state, _, counted := countedHome(t)
	gone := map[string]string{
		"5e6f-gone-clean.jsonl": `{"type":"user","message":{"role":"user","content":"nothing to hide"}}`,
		"8a9b-gone-key.jsonl":   `{"type":"assistant","message":{"role":"assistant","content":"export GITHUB_TOKEN=ghp_R3vQy8NcLkZt0WmPb2XsJd7HfAe5Ug9KiOqY"}}`,
	}
	for name, line := range gone {
		os.WriteFile(filepath.Join(root, name), []byte(line+"\n"), 0o644)
	}
	run := func() {
		p := start(t, "--policy", pol, "--state-dir", state)
		counted(p, "bytes")
		if err := p.stop(10 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	run()
	for name := range gone {
		os.Remove(filepath.Join(root, name))
	}
	run()
	list := func() string { return strings.Join(secretsListed(t, pol, state), "\n") }
	withTally := list()
	if !strings.Contains(withTally, "8a9b-gone-key.jsonl@") {
		t.Fatalf("the deleted session's credential is not listed:\n%s", withTally)
	}
	path := filepath.Join(state, "secrets-tally.json")
	kept, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(path)
	if without := list(); without != withTally {
		t.Fatalf("with the tally:\n%s\nwithout:\n%s", withTally, without)
	}
	// The tally made to say every held log holds none: none is read.
	var tally map[string]any
	json.Unmarshal(kept, &tally)
	forged := 0
	for _, h := range tally["held"].(map[string]any) {
		for _, l := range h.(map[string]any)["logs"].(map[string]any) {
			l.(map[string]any)["kinds"] = map[string]any{}
			forged++
		}
	}
	write := func() {
		b, _ := json.Marshal(tally)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write()
	if got := list(); forged == 0 || strings.Contains(got, "8a9b-gone-key.jsonl@") {
		t.Errorf("a held log the tally vouches for was read (%d logs in the tally):\n%s", forged, got)
	}
	// Its stamp another: read.
	for _, h := range tally["held"].(map[string]any) {
		for _, l := range h.(map[string]any)["logs"].(map[string]any) {
			l.(map[string]any)["stamp"] = "0:0:false"
		}
	}
	write()
	if got := list(); got != withTally {
		t.Errorf("held logs whose stamp changed since the tally, listed:\n%s\nwant:\n%s", got, withTally)
	}
}
