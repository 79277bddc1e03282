package policy_test

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/layout/memoryhistory"
	"github.com/memwatch/memwatch/layout/nowhistory"
	"github.com/memwatch/memwatch/layout/registry"
	"github.com/memwatch/memwatch/policy"
)

func TestParseValid(t *testing.T) {
	src := `version: 1
state_dir: /var/lib/mw
control:
  socket: /run/mw.sock
llm:
  default:
    base_url: http://127.0.0.1:11434/v1
    model: qwen2.5:7b
    timeout: 45s
    daily_token_budget: 5000
stores:
  - name: apps
    layout: now-history
    paths: ["/srv/spaces/*/apps/*"]
    compactor: llm
    settle: 250ms
    max_size: 64KiB
    run_retention: 90d
    max_loss: 10%
    sweep: 0
    cooldown: 0
  - name: more
    layout: now-history
    paths: ["/x/*"]
    max_size: 0
    max_loss: 0
`
	p, err := policy.Parse("p.yaml", []byte(src), registry.Specs())
	if err != nil {
		t.Fatal(err)
	}
	s := p.Stores[0]
	if s.Name != "apps" || s.Layout != "now-history" || s.Compactor != "llm" || s.LLM != "default" || s.Settle != 250*time.Millisecond || s.MaxLoss != 0.10 {
		t.Errorf("store = %+v", s)
	}
	if got := nowhistory.OptionsOf(s).MaxSize; got != 64<<10 {
		t.Errorf("max_size = %v", got)
	}
	if got := nowhistory.OptionsOf(s).RunRetention; got != 90*24*time.Hour {
		t.Errorf("run_retention = %v", got)
	}
	if got := nowhistory.OptionsOf(s).KeepHistory; got != 10 {
		t.Errorf("default keep_history = %d, want 10", got)
	}
	ep := p.LLM["default"]
	if ep.Timeout != 45*time.Second || ep.MaxConcurrency != 2 || ep.DailyTokenBudget != 5000 {
		t.Errorf("endpoint = %+v", ep)
	}
	if s.Sweep != 0 || s.Cooldown != 0 || nowhistory.OptionsOf(p.Stores[1]).MaxSize != 0 || p.Stores[1].MaxLoss != 0 {
		t.Errorf("bare zeros not accepted: sweep %v cooldown %v max_size %v max_loss %v", s.Sweep, s.Cooldown, nowhistory.OptionsOf(p.Stores[1]).MaxSize, p.Stores[1].MaxLoss)
	}
	if p.StateDir != "/var/lib/mw" || p.Control.Socket != "/run/mw.sock" {
		t.Errorf("policy = %+v", p)
	}
}

// TestParseErrors covers every error class with its position and message.
// TestPresets: a preset expands to its layout, paths and options, and any
// key the store gives wins.
func TestPresets(t *testing.T) {
	p, err := policy.Parse("p.yaml", []byte("version: 1\nstores:\n  - name: cc\n    preset: claude-code\n  - name: oc\n    preset: openclaw\n    paths: [\"/srv/oc\"]\n    window: 30\n"), registry.Specs())
	if err != nil {
		t.Fatal(err)
	}
	home, _ := os.UserHomeDir()
	cc, oc := p.Stores[0], p.Stores[1]
	if cc.Layout != "memory-history" || cc.Preset != "claude-code" || len(cc.Paths) != 1 || cc.Paths[0] != filepath.Join(home, ".claude/projects/*") {
		t.Errorf("claude-code: got layout %s, preset %s, paths %v", cc.Layout, cc.Preset, cc.Paths)
	}
	if got := memoryhistory.OptionsOf(cc).MemoryDir; got != "memory" {
		t.Errorf("claude-code memory_dir: got %q, want memory", got)
	}
	if got := memoryhistory.OptionsOf(cc).MemoryMaxSize; got != 25<<10 {
		t.Errorf("claude-code memory_max_size: got %d, want 25KiB", got)
	}
	if oc.Paths[0] != "/srv/oc" || memoryhistory.OptionsOf(oc).Window != 30 || memoryhistory.OptionsOf(oc).Sessions != "agents/*/sessions/*.jsonl" {
		t.Errorf("openclaw with overrides: got paths %v, window %d, sessions %q", oc.Paths, memoryhistory.OptionsOf(oc).Window, memoryhistory.OptionsOf(oc).Sessions)
	}
}

func TestParseErrors(t *testing.T) {
	const head = "version: 1\nstores:\n  - name: apps\n    layout: now-history\n    paths: [\"/x/*\"]\n"
	tests := []struct {
		name, src, want string
	}{
		{"unknown key", head + "    max_sise: 1KiB\n", `p.yaml:6:5: unknown key "max_sise" in store "apps"; did you mean "max_size"?`},
		{"key of another layout", head + "    window: 50\n", `p.yaml:6:5: key "window" belongs to layout memory-history, not now-history`},
		{"sessions outside the root", "version: 1\nstores:\n  - name: ws\n    layout: memory-history\n    paths: [\"/x/*\"]\n    sessions: ../sessions/*.jsonl\n", `p.yaml:6:15: sessions "../sessions/*.jsonl" must stay inside each root (relative, no ..): memwatch never reads or writes outside a root; make the root a directory that holds both`},
		{"unknown mcp key", "version: 1\nmcp:\n  allow_undoo: true\n", `p.yaml:3:3: unknown key "allow_undoo" in mcp; did you mean "allow_undo"?`},
		{"mcp not a bool", "version: 1\nmcp:\n  read_only: maybe\n", `p.yaml:3:14: mcp.read_only must be true or false, not "maybe"`},
		{"unknown top-level key", "version: 1\nstors: []\n", `p.yaml:2:1: unknown key "stors" in top level; did you mean "stores"?`},
		{"wrong type", head + "    keep_history: ten\n", `p.yaml:6:19: keep_history must be an integer, not "ten"`},
		{"bad glob", "version: 1\nstores:\n  - name: apps\n    layout: now-history\n    paths: [\"/x/[a\"]\n", `p.yaml:5:13: bad glob "/x/[a": syntax error in pattern`},
		{"shell negation", "version: 1\nstores:\n  - name: apps\n    layout: now-history\n    paths: [\"/x/[!.]*\"]\n", `p.yaml:5:13: bad glob "/x/[!.]*": [!...] is no negation here (it is the class of ! and the rest); write [^...]`},
		{"shell negation in a root's glob", "version: 1\nstores:\n  - name: oc\n    preset: openclaw\n    paths: [\"/x\"]\n    sessions: \"agents/*/sessions/*[!y].jsonl\"\n", `p.yaml:6:15: sessions: glob "agents/*/sessions/*[!y].jsonl": [!...] is no negation here (it is the class of ! and the rest); write [^...]`},
		{"relative path", "version: 1\nstores:\n  - name: apps\n    layout: now-history\n    paths: [\"x/*\"]\n", `p.yaml:5:13: path "x/*" must be absolute (or start with ~/)`},
		{"bad size", head + "    max_size: 10 parsecs\n", `p.yaml:6:15: max_size: invalid size "10 parsecs": want a number with an optional unit B, KB, KiB, MB, MiB, GB or GiB (e.g. 100KiB)`},
		{"bad duration", head + "    settle: soon\n", `p.yaml:6:13: settle: invalid duration "soon": want e.g. 500ms, 30s, 10m, 2h or 90d`},
		{"duration without unit", head + "    settle: 5\n", `p.yaml:6:13: settle needs a unit, e.g. 5s or 5m`},
		{"missing name", "version: 1\nstores:\n  - layout: now-history\n    paths: [\"/x/*\"]\n", `p.yaml:3:5: missing required key name in store`},
		{"missing layout", "version: 1\nstores:\n  - name: a\n    paths: [\"/x/*\"]\n", `p.yaml:3:5: missing required key layout (one of now-history, facts-episodes, memory-history, session-detail, app-records) or preset (one of ` + strings.Join(policy.PresetNames(), ", ") + `)`},
		{"unknown preset", "version: 1\nstores:\n  - name: a\n    preset: claude\n", `p.yaml:4:13: unknown preset "claude": want one of ` + strings.Join(policy.PresetNames(), ", ") + `; did you mean "claude-code"?`},
		{"preset and another layout", "version: 1\nstores:\n  - name: a\n    preset: codex\n    layout: session-detail\n", `p.yaml:5:13: preset codex uses layout memory-history, not session-detail: drop one of them`},
		{"missing paths", "version: 1\nstores:\n  - name: a\n    layout: now-history\n", `p.yaml:3:5: missing required key paths in store "a": at least one glob of store roots`},
		{"unknown layout", "version: 1\nstores:\n  - name: a\n    layout: now-histroy\n    paths: [\"/x/*\"]\n", `p.yaml:4:13: unknown layout "now-histroy": want one of now-history, facts-episodes, memory-history, session-detail, app-records; did you mean "now-history"?`},
		{"bad enum", "version: 1\nstores:\n  - name: a\n    layout: memory-history\n    paths: [\"/x/*\"]\n    history_mode: mirorr\n", `p.yaml:6:19: history_mode must be one of mirror, move, not "mirorr"; did you mean "mirror"?`},
		{"duplicate store", head + "  - name: apps\n    layout: now-history\n    paths: [\"/y/*\"]\n", `p.yaml:6:11: store "apps" is already defined at p.yaml:3:11`},
		{"missing version", "stores: []\n", `p.yaml:1:1: missing required key version: add ` + "`version: 1`" + ` at the top`},
		{"unsupported version", "version: 2\n", `p.yaml:1:10: unsupported policy version 2: this memwatch reads version 1`},
		{"replicate url not s3", "version: 1\nreplicate:\n  url: https://bucket/x\n", `p.yaml:3:8: replicate.url must be s3://BUCKET/PREFIX (the bucket, then where in it the state goes)`},
		{"replicate without url", "version: 1\nreplicate:\n  region: eu-west-1\n", `p.yaml:2:1: missing required key url in replicate: s3://BUCKET/PREFIX`},
		{"replicate key without secret", "version: 1\nreplicate:\n  url: s3://b/p\n  access_key_env: K\n", `p.yaml:2:1: replicate names an access key without a secret`},
		{"replicate env and file", "version: 1\nreplicate:\n  url: s3://b/p\n  access_key_env: K\n  access_key_file: /nonexistent\n  secret_key_env: S\n", `replicate sets both access_key_env and access_key_file; keep one`},
		{"replicate endpoint with credentials", "version: 1\nreplicate:\n  url: s3://b/p\n  endpoint: http://key:secret@127.0.0.1:9000\n", `p.yaml:4:13: replicate.endpoint must be an http(s) URL such as http://127.0.0.1:9000 (no credentials in it: use access_key_env)`},
		{"replicate sync interval", "version: 1\nreplicate:\n  url: s3://b/p\n  sync_interval: 10ms\n", `p.yaml:4:18: replicate.sync_interval must be between 50ms and 1m (how far the bucket may be behind)`},
		{"replicate unknown key", "version: 1\nreplicate:\n  url: s3://b/p\n  force_path_styl: true\n", `p.yaml:4:3: unknown key "force_path_styl" in replicate; did you mean "force_path_style"?`},
		{"syntax error", "version: 1\nstores: [\n", `p.yaml:2:9: invalid YAML:`},
		{"llm endpoint missing", "version: 1\nstores:\n  - name: a\n    layout: now-history\n    paths: [\"/x/*\"]\n    compactor: llm\n", `p.yaml:3:5: store "a": compactor llm needs endpoint "default" under llm:, which is not defined`},
		{"bad compactor", head + "    compactor: gpt\n", `p.yaml:6:16: compactor must be one of heuristic, llm, not "gpt"`},
		{"endpoint without model", "version: 1\nllm:\n  default:\n    base_url: http://x/v1\n", `p.yaml:3:3: missing required key model in llm.default`},
		{"endpoint bad url", "version: 1\nllm:\n  default:\n    base_url: localhost:11434\n    model: m\n", `p.yaml:4:15: llm.default.base_url must be an http(s) URL such as http://127.0.0.1:11434/v1`},
		{"budget off", "version: 1\nllm:\n  default:\n    base_url: http://x/v1\n    model: m\n    daily_token_budget: 0\n", `p.yaml:6:25: llm.default.daily_token_budget must be at least 1 (the budget is a hard cap and cannot be switched off)`},
		{"tcp not loopback", "version: 1\ncontrol:\n  tcp: 0.0.0.0:7070\n  token_file: /t\n", `p.yaml:3:8: control.tcp must be a loopback address such as 127.0.0.1:7070, not "0.0.0.0:7070"`},
		{"bad max_loss", head + "    max_loss: 150%\n", `p.yaml:6:15: max_loss must be between 0% and 100%`},
		{"bad store name", "version: 1\nstores:\n  - name: My Apps\n    layout: now-history\n    paths: [\"/x/*\"]\n", `p.yaml:3:11: store name "My Apps" must be lowercase letters, digits, '.', '_' or '-' (it is used in API paths)`},
		{"stores not a list", "version: 1\nstores:\n  name: a\n", `p.yaml:3:3: stores must be a list of stores`},
		{"alias", "version: 1\nx: &a {}\n", `p.yaml:2:1: unknown key "x" in top level`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := policy.Parse("p.yaml", []byte(tt.src), registry.Specs())
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			var es policy.Errors
			if !errors.As(err, &es) {
				t.Fatalf("error %v is not policy.Errors", err)
			}
			if got := err.Error(); !strings.Contains(got, tt.want) {
				t.Errorf("got\n  %s\nwant it to contain\n  %s", got, tt.want)
			}
		})
	}
}

func TestParseReportsEveryError(t *testing.T) {
	src := "version: 1\nstores:\n  - name: a\n    layout: now-history\n    paths: [\"/x/*\"]\n    max_sise: 1\n    settle: x\n  - name: b\n"
	_, err := policy.Parse("p.yaml", []byte(src), registry.Specs())
	var es policy.Errors
	if !errors.As(err, &es) || len(es) != 4 {
		t.Fatalf("got %d errors (%v), want 4", len(es), err)
	}
	for i := 1; i < len(es); i++ {
		if es[i].Pos.Line < es[i-1].Pos.Line {
			t.Errorf("errors not in file order: %v", err)
		}
	}
}

func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("version: 1\nstores:\n  - name: apps\n    layout: now-history\n    paths: [\"/x/*\"]\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "b.yml"), []byte("version: 1\nstores:\n  - name: more\n    layout: now-history\n    paths: [\"/y/*\"]\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "example.yaml"), []byte("# version: 1\n# stores: []\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not yaml: ["), 0o644)
	p, err := policy.Load(dir, registry.Specs())
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Stores) != 2 || p.Stores[0].Name != "apps" || p.Stores[1].Name != "more" {
		t.Errorf("stores = %v", p.Stores)
	}
	// The same store name in two files is an error naming both places.
	os.WriteFile(filepath.Join(dir, "c.yaml"), []byte("version: 1\nstores:\n  - name: apps\n    layout: now-history\n    paths: [\"/z/*\"]\n"), 0o644)
	_, err = policy.Load(dir, registry.Specs())
	if err == nil || !strings.Contains(err.Error(), "c.yaml:3:11: store \"apps\" is already defined at "+filepath.Join(dir, "a.yaml")+":3:11") {
		t.Errorf("duplicate across files: %v", err)
	}
}

func TestEmptyPolicyIsValid(t *testing.T) {
	for _, src := range []string{"", "# only comments\n", "version: 1\n", "version: 1\nstores: []\n"} {
		p, err := policy.Parse("p.yaml", []byte(src), registry.Specs())
		if err != nil || len(p.Stores) != 0 {
			t.Errorf("Parse(%q) = %v, %v; want a valid policy with no stores", src, p, err)
		}
	}
}

func TestUnits(t *testing.T) {
	sizes := map[string]policy.Size{"100KiB": 100 << 10, "8KB": 8000, "1.5MiB": 3 << 19, "64 MiB": 64 << 20, "10": 10, "2GB": 2e9}
	for in, want := range sizes {
		if got, err := policy.ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	durs := map[string]time.Duration{"90d": 90 * 24 * time.Hour, "1d12h": 36 * time.Hour, "500ms": 500 * time.Millisecond, "0": 0, "2w": 14 * 24 * time.Hour, "1y": 365 * 24 * time.Hour, "1w2d3h4m5s6ms": 9*24*time.Hour + 3*time.Hour + 4*time.Minute + 5*time.Second + 6*time.Millisecond}
	for in, want := range durs {
		if got, err := policy.ParseDuration(in); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"-1d", "d", "5 days", "", "1d1d", "1h2d", "3x", "99999999999999999999d"} {
		if _, err := policy.ParseDuration(bad); err == nil && bad != "" {
			t.Errorf("ParseDuration(%q) accepted", bad)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("version: 1\nstores:\n  - name: a\n    layout: now-history\n    paths: [\"/x/*\"]\n"))
	f.Add([]byte("version: 1\nllm:\n  d: {base_url: 'http://x', model: m}\n"))
	f.Add([]byte("{[}: \x00\xff"))
	f.Add([]byte("version: 1\nreplicate:\n  url: s3://b/p\n  sync_interval: 2s\ncontrol:\n  tokens:\n    - {name: a, sha256: x, stores: [s], rights: [read]}\nmcp: {max_sessions: 0}\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		p, err := policy.Parse("f.yaml", src, registry.Specs())
		if err == nil && p == nil {
			t.Fatal("nil policy without error")
		}
		var es policy.Errors
		if err != nil && errors.As(err, &es) {
			for _, e := range es {
				if e.Pos.Line < 1 || e.Pos.File != "f.yaml" {
					t.Fatalf("error without a position: %v", e)
				}
			}
		}
		if err != nil {
			return
		}
		// What validate --expand prints loads back to the same policy.
		out := policy.Expand(p, 0)
		again, err := policy.Parse("expanded.yaml", []byte(out), registry.Specs())
		if err != nil {
			t.Fatalf("the expansion does not load: %v\n%s\nfrom\n%s", err, out, src)
		}
		if got := policy.Expand(again, 0); got != out {
			t.Fatalf("expanding the expansion: got\n%s\nwant\n%s", got, out)
		}
	})
}

// TestPolicyBounds: a policy nested far too deep, or far too large, is
// refused at once with its position, before the YAML parser runs.
func TestPolicyBounds(t *testing.T) {
	deep := "version: 1\nstores: " + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + "\n"
	deepMap := "version: 1\nx: " + strings.Repeat("{a: ", 100000) + "1" + strings.Repeat("}", 100000) + "\n"
	dashes := "version: 1\nstores:\n" + strings.Repeat("- ", 5000) + "x\n"
	big := "version: 1\n# " + strings.Repeat("x", policy.MaxFileBytes) + "\n"
	for name, src := range map[string]string{"flow lists": deep, "flow maps": deepMap, "dash sequences": dashes, "size": big} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			_, err := policy.Parse("p.yaml", []byte(src), registry.Specs())
			if err == nil || !strings.Contains(err.Error(), "p.yaml:") {
				t.Fatalf("err = %v, want a positioned error", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
	// Quoted brackets and apostrophes in plain text are not nesting.
	ok := "version: 1\nstores:\n  - name: a\n    layout: now-history\n    paths: [\"/srv/x\"]\n    settle: 1s # [[[[ comment\n    snapshot_file: \"it's [[[[[[[[\"\n"
	if _, err := policy.Parse("p.yaml", []byte(ok), registry.Specs()); err != nil {
		t.Errorf("a normal policy was refused: %v", err)
	}
}

func TestWarnsRecordCreationNeedsTheLLM(t *testing.T) {
	p, err := policy.Parse("p.yaml", []byte("version: 1\nstores:\n  - name: r\n    layout: app-records\n    paths: [\"/srv/app.db\"]\n    conversations: \"/srv/conv/{app}/*.jsonl\"\n"), registry.Specs())
	if err != nil {
		t.Fatal(err)
	}
	if ws := p.Warnings("/var/lib/memwatch"); len(ws) != 1 || !strings.Contains(ws[0].Msg, "only with compactor: llm") {
		t.Errorf("warnings: %v", ws)
	}
}

// TestEveryErrorAtOnce: a policy with a decoding error and a cross-field
// error reports both, not only the first stage's.
func TestEveryErrorAtOnce(t *testing.T) {
	_, err := policy.Parse("p.yaml", []byte("version: 1\nstores:\n  - name: a\n    layout: memory-history\n    paths: [\"/x/*\"]\n    windw: 5\n    sessions: ../s/*.jsonl\n"), registry.Specs())
	var errs policy.Errors
	if !errors.As(err, &errs) || len(errs) != 2 {
		t.Fatalf("got %v, want the unknown key and the sessions path", err)
	}
	if !strings.Contains(err.Error(), `unknown key "windw"`) || !strings.Contains(err.Error(), `sessions "../s/*.jsonl" must stay inside`) {
		t.Errorf("got %v", err)
	}
}

// TestLayoutOptionsAreTheLayouts: every layout's options decode from their
// own keys (the struct tags are the schema), a key of another layout is
// refused by name, and validate --expand lists them in declared order.
func TestLayoutOptionsAreTheLayouts(t *testing.T) {
	src := "version: 1\nstores:\n  - name: m\n    layout: memory-history\n    paths: [\"/x/*\"]\n    window: 7\n    history_mode: move\n    memory_max_size: 2KiB\n    session_idle: 5m\n"
	p, err := policy.Parse("p.yaml", []byte(src), registry.Specs())
	if err != nil {
		t.Fatal(err)
	}
	o := memoryhistory.OptionsOf(p.Stores[0])
	if o.Window != 7 || o.HistoryMode != "move" || o.MemoryMaxSize != 2<<10 || o.SessionIdle != 5*time.Minute || o.Keep != 10 {
		t.Errorf("got %+v, want window 7, move, 2KiB, 5m and the default keep 10", o)
	}
	list := policy.OptionList(p.Stores[0].Options)
	if len(list) == 0 || list[0].Key != "memory_max_size" {
		t.Errorf("OptionList: got %v, want memory_max_size first (declared order)", list)
	}
	for _, tt := range []struct{ src, want string }{
		{"version: 1\nstores:\n  - name: m\n    layout: memory-history\n    paths: [\"/x/*\"]\n    max_size: 1KiB\n", `p.yaml:6:5: key "max_size" belongs to layout now-history, not memory-history`},
		{"version: 1\nstores:\n  - name: m\n    layout: memory-history\n    paths: [\"/x/*\"]\n    history_mode: mirrored\n", `p.yaml:6:19: history_mode must be one of mirror, move, not "mirrored"; did you mean "mirror"?`},
		{"version: 1\nstores:\n  - name: r\n    layout: app-records\n    paths: [\"/x/a.db\"]\n    conversations: conv/*.jsonl\n", `store "r": conversations "conv/*.jsonl" must be an absolute glob`},
		{"version: 1\nstores:\n  - name: r\n    layout: app-records\n    paths: [\"/x/a.db\"]\n    table: \"\"\n", `store "r": table must name the records table`},
	} {
		_, err := policy.Parse("p.yaml", []byte(tt.src), registry.Specs())
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q): got %v, want an error containing %q", tt.src, err, tt.want)
		}
	}
}

var update = flag.Bool("update", false, "rewrite the policy reference in docs/policy.md")

// TestReadmeReference: the policy reference (docs/policy.md) is what the
// declarations say (go test ./policy -update rewrites it).
func TestReadmeReference(t *testing.T) {
	const begin, end = "<!-- policy-reference:begin (go test ./policy -update writes it) -->\n", "<!-- policy-reference:end -->"
	path := filepath.Join("..", "docs", "policy.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("docs/policy.md has no policy reference between %q and %q", begin, end)
	}
	want := policy.Reference(registry.Specs())
	if got := s[i+len(begin) : j]; got != want {
		if *update {
			os.WriteFile(path, []byte(s[:i+len(begin)]+want+s[j:]), 0o644)
			return
		}
		t.Errorf("docs/policy.md's policy reference is stale: go test ./policy -update rewrites it")
	}
}

// TestReadmeExample: the example policy (docs/policy.md) decodes through
// the declarations, every key of it.
func TestReadmeExample(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "policy.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "```yaml\nversion: 1\nstate_dir:")
	if i < 0 {
		t.Fatal("docs/policy.md has no example policy")
	}
	ex := s[i+len("```yaml\n"):]
	ex = ex[:strings.Index(ex, "```")]
	// Uncommented, its optional keys are decoded too.
	key := regexp.MustCompile(`^(\s*)# (\s*(- )?[a-z_0-9]+: )`)
	var lines []string
	for _, l := range strings.Split(ex, "\n") {
		lines = append(lines, key.ReplaceAllString(l, "$1$2"))
	}
	src := strings.Join(lines, "\n")
	src = strings.ReplaceAll(src, "658d7e3c...", strings.Repeat("ab", 32))
	_, err = policy.Parse("docs/policy.md", []byte(src), registry.Specs())
	var pe policy.Errors
	if errors.As(err, &pe) {
		for _, e := range pe {
			// Only what needs this machine: users, files, roots.
			if strings.Contains(e.Msg, "cannot read") || strings.Contains(e.Msg, "owner") || strings.Contains(e.Msg, "user") {
				continue
			}
			t.Errorf("%v", e)
		}
	} else if err != nil {
		t.Fatal(err)
	}
}

// TestDefaultsAgree: the constants other packages use are the declared
// defaults.
func TestDefaultsAgree(t *testing.T) {
	p := policy.Default()
	if p.Control.MaxRequestBody != policy.DefaultMaxRequestBody {
		t.Errorf("control.max_request_body: declared %v, constant %v", p.Control.MaxRequestBody, policy.DefaultMaxRequestBody)
	}
	s, err := policy.Parse("p.yaml", []byte("version: 1\nstores:\n  - name: a\n    layout: now-history\n    paths: [\"/x/*\"]\n"), registry.Specs())
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Stores[0].MaxRead; got != policy.DefaultMaxRead {
		t.Errorf("max_read: declared %v, constant %v", got, policy.DefaultMaxRead)
	}
}

// TestFleetAlone: a central node's policy has fleet: and no stores; its
// URL gives the bucket and the prefix the hosts are under, and each host's
// replicate section is under it.
func TestFleetAlone(t *testing.T) {
	src := "version: 1\nfleet:\n  url: s3://memwatch/fleet/\n  endpoint: http://127.0.0.1:9000\n  force_path_style: true\n  access_key_env: K\n  secret_key_env: S\n"
	p, err := policy.Parse("p.yaml", []byte(src), registry.Specs())
	if err != nil {
		t.Fatal(err)
	}
	f := p.Fleet
	if f == nil || len(p.Stores) != 0 || f.Bucket != "memwatch" || f.Prefix != "fleet" || f.Interval != 5*time.Second || f.MaxHosts != 256 {
		t.Fatalf("fleet = %+v, stores %d", f, len(p.Stores))
	}
	h := f.Host("box-1")
	if got, want := h.URL, "s3://memwatch/fleet/box-1"; got != want {
		t.Errorf("host URL %q, want %q", got, want)
	}
	if h.Bucket != "memwatch" || h.Prefix != "fleet/box-1" || h.Endpoint != f.Endpoint || !h.ForcePathStyle || h.AccessKeyEnv != "K" {
		t.Errorf("host section %+v", h)
	}
	// A token scoped to hosts, on a central node.
	scoped := src + "control:\n  tokens:\n    - {name: a, sha256: " + strings.Repeat("a", 64) + ", hosts: [box-1, \"box-2:1001\"], rights: [read]}\n"
	if _, err := policy.Parse("p.yaml", []byte(scoped), registry.Specs()); err != nil {
		t.Errorf("a token scoped to hosts: %v", err)
	}
	for _, c := range []struct {
		in   string
		host string
		uid  int
	}{{"box-1", "box-1", -1}, {"box-2:1001", "box-2", 1001}, {"box-2:0", "box-2", 0}} {
		if host, uid, err := policy.HostScope(c.in); err != nil || host != c.host || uid != c.uid {
			t.Errorf("HostScope(%q) = %q, %d, %v; want %q, %d", c.in, host, uid, err, c.host, c.uid)
		}
	}
	for _, c := range []struct{ src, want string }{
		{"version: 1\nfleet:\n  endpoint: http://x\n", "missing required key url in fleet"},
		{"version: 1\nfleet:\n  url: s3://b/p\n  access_key_env: K\n", "fleet names an access key without a secret"},
		{"version: 1\nfleet:\n  url: s3://b/p\n  interval: 10ms\n", "interval"},
		{"version: 1\ncontrol:\n  tokens:\n    - {name: a, sha256: " + strings.Repeat("a", 64) + ", hosts: [box-1], rights: [read]}\n", "hosts: is for a central node"},
		{"version: 1\nfleet:\n  url: s3://b/p\ncontrol:\n  tokens:\n    - {name: a, sha256: " + strings.Repeat("a", 64) + ", hosts: [../etc], rights: [read]}\n", `host "../etc"`},
		{"version: 1\nfleet:\n  url: s3://b/p\ncontrol:\n  tokens:\n    - {name: a, sha256: " + strings.Repeat("a", 64) + ", hosts: [\"box-1:no-such-user-here\"], rights: [read]}\n", "owner \"no-such-user-here\""},
	} {
		if _, err := policy.Parse("p.yaml", []byte(c.src), registry.Specs()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want an error saying %q", c.src, err, c.want)
		}
	}
}
