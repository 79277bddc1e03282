package policy

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"
)

// Load reads a policy file, or every *.yaml and *.yml file in a directory,
// merges them and validates the result. The error, if any, is an Errors value
// listing every problem as FILE:LINE:COLUMN: message.
//
// layouts are the layouts a store may name (layout/registry has them).
func Load(path string, layouts []LayoutSpec) (*Policy, error) {
	files, err := policyFiles(path)
	if err != nil {
		return nil, err
	}
	p := Default()
	var errs Errors
	seen := &mergeState{stores: map[string]Pos{}, endpoints: map[string]Pos{}}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read policy: %w", err)
		}
		d := &decoder{file: f, p: p, seen: seen, layouts: layouts}
		if e := checkShape(f, data); e != nil {
			errs = append(errs, e)
			continue
		}
		d.decodeFile(data)
		errs = append(errs, d.errs...)
		p.Files = append(p.Files, f)
	}
	if len(errs) > 0 {
		// Every error at once: the cross-field checks run on what decoded.
		errs = append(errs, p.validate(true)...)
		return nil, errs.sorted()
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// Bounds of what a policy file may be: policies are small, and a YAML
// parser given a file nested a hundred thousand levels deep takes minutes
// and gigabytes before it fails.
const (
	MaxFileBytes = 1 << 20
	MaxDepth     = 64
)

// checkShape refuses a policy file over MaxFileBytes or nested deeper than
// MaxDepth (flow brackets, block indentation or "- - -" sequences), before
// the YAML parser sees it.
func checkShape(file string, data []byte) *Error {
	if len(data) > MaxFileBytes {
		return &Error{Pos: Pos{File: file, Line: 1, Column: 1}, Msg: fmt.Sprintf("policy file is %d bytes; the limit is %d (1 MiB): split it into several files in a directory", len(data), MaxFileBytes)}
	}
	depth, line, col := 0, 1, 0
	var quote byte
	lineStart := true
	indent, dashes := 0, 0
	for i := 0; i < len(data); i++ {
		c := data[i]
		col++
		if c == '\n' {
			line, col, lineStart, indent, dashes = line+1, 0, true, 0, 0
			if quote == '\'' {
				continue
			}
			quote = 0 // a double-quoted scalar may span lines, but not for depth
			continue
		}
		if quote != 0 {
			if c == '\\' && quote == '"' {
				i++
			} else if c == quote {
				quote = 0
			}
			continue
		}
		switch {
		case c == '#' && (col == 1 || data[i-1] == ' ' || data[i-1] == '\t'):
			for i < len(data) && data[i] != '\n' {
				i++
			}
			i--
			continue
		case (c == '"' || c == '\'') && (col == 1 || strings.IndexByte(" \t[{,:-", data[i-1]) >= 0):
			quote = c
		case c == '[' || c == '{':
			depth++
		case c == ']' || c == '}':
			depth--
		case lineStart && c == ' ':
			indent++
		case lineStart && c == '-' && i+1 < len(data) && (data[i+1] == ' ' || data[i+1] == '\n'):
			dashes++
			indent++
			continue
		}
		if c != ' ' && c != '-' {
			lineStart = false
		}
		if depth > MaxDepth || dashes > MaxDepth || indent > 2*MaxDepth {
			return &Error{Pos: Pos{File: file, Line: line, Column: col}, Msg: fmt.Sprintf("policy is nested deeper than %d levels; memwatch policies need a handful", MaxDepth)}
		}
	}
	return nil
}

// Parse decodes one policy document held in memory; name is used in messages.
func Parse(name string, data []byte, layouts []LayoutSpec) (*Policy, error) {
	p := Default()
	d := &decoder{file: name, p: p, seen: &mergeState{stores: map[string]Pos{}, endpoints: map[string]Pos{}}, layouts: layouts}
	if e := checkShape(name, data); e != nil {
		return nil, Errors{e}
	}
	d.decodeFile(data)
	p.Files = []string{name}
	if len(d.errs) > 0 {
		return nil, append(d.errs, p.validate(true)...).sorted()
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

func policyFiles(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("open policy: %w", err)
	}
	if !fi.IsDir() {
		return []string{path}, nil
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("read policy directory: %w", err)
	}
	var files []string
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || strings.HasPrefix(n, ".") {
			continue
		}
		if strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml") {
			files = append(files, filepath.Join(path, n))
		}
	}
	sort.Strings(files)
	return files, nil
}

// mergeState remembers where names were defined across the files of a directory.
type mergeState struct {
	stores       map[string]Pos
	endpoints    map[string]Pos
	stateDirPos  *Pos
	controlPos   *Pos
	mcpPos       *Pos
	metricsPos   *Pos
	uiPos        *Pos
	replicatePos *Pos
	shutdownSeen *Pos
	maxJobsSeen  *Pos
}

type decoder struct {
	file    string
	p       *Policy
	seen    *mergeState
	layouts []LayoutSpec
	errs    Errors
}

func (d *decoder) layout(name string) (LayoutSpec, bool) {
	for _, l := range d.layouts {
		if l.Name == name {
			return l, true
		}
	}
	return LayoutSpec{}, false
}

func (d *decoder) layoutNames() []string {
	var out []string
	for _, l := range d.layouts {
		out = append(out, l.Name)
	}
	return out
}

func (d *decoder) pos(n ast.Node) Pos {
	// A mapping's own token is its first ":"; point at its first key instead.
	switch m := n.(type) {
	case *ast.MappingNode:
		if len(m.Values) > 0 && m.Values[0].Key != nil {
			n = m.Values[0].Key
		}
	case *ast.MappingValueNode:
		if m.Key != nil {
			n = m.Key
		}
	}
	if n == nil || n.GetToken() == nil {
		return Pos{File: d.file, Line: 1, Column: 1}
	}
	tp := n.GetToken().Position
	return Pos{File: d.file, Line: tp.Line, Column: tp.Column}
}

func (d *decoder) errorf(n ast.Node, format string, args ...any) {
	d.errs = append(d.errs, &Error{Pos: d.pos(n), Msg: fmt.Sprintf(format, args...)})
}

func (d *decoder) decodeFile(data []byte) {
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		d.syntaxError(err)
		return
	}
	var body ast.Node
	for _, doc := range f.Docs {
		if doc == nil || doc.Body == nil {
			continue
		}
		if _, isComment := doc.Body.(*ast.CommentGroupNode); isComment {
			continue
		}
		if body != nil {
			d.errorf(doc.Body, "a policy file holds one YAML document; split the others into their own files")
			return
		}
		body = doc.Body
	}
	if body == nil {
		return // empty, or only comments: a valid policy that configures nothing
	}
	top, ok := d.mapping(body, "the policy file")
	if !ok {
		return
	}
	d.checkKeys(top, "top level", []string{"version", "state_dir", "control", "mcp", "metrics", "ui", "shutdown_timeout", "max_jobs", "spool_retention", "journal_max_age", "journal_max_bytes", "job_timeout", "llm", "replicate", "stores"}, nil)
	var versionNode ast.Node
	for _, kv := range top {
		k, v := keyOf(kv), kv.Value
		switch k {
		case "version":
			versionNode = kv.Key
			if n, ok := d.intVal(v, "version"); ok && n != Version {
				d.errorf(v, "unsupported policy version %d: this memwatch reads version %d", n, Version)
			}
		case "state_dir":
			if s, ok := d.str(v, "state_dir"); ok {
				d.once(&d.seen.stateDirPos, kv.Key, "state_dir")
				d.p.StateDir = expandHome(s)
			}
		case "shutdown_timeout":
			d.once(&d.seen.shutdownSeen, kv.Key, "shutdown_timeout")
			if dur, ok := d.duration(v, "shutdown_timeout"); ok {
				d.p.ShutdownTimeout = dur
			}
		case "spool_retention":
			if dur, ok := d.duration(v, "spool_retention"); ok {
				d.p.SpoolRetention = dur
			}
		case "journal_max_age":
			if dur, ok := d.duration(v, k); ok {
				d.p.JournalMaxAge = dur
			}
		case "journal_max_bytes":
			if sz, ok := d.size(v, k); ok {
				d.p.JournalMaxBytes = sz
			}
		case "job_timeout":
			if dur, ok := d.duration(v, k); ok {
				if dur < time.Second {
					d.errorf(v, "job_timeout must be at least 1s (a job past it is cancelled)")
				} else {
					d.p.JobTimeout = dur
				}
			}
		case "max_jobs":
			d.once(&d.seen.maxJobsSeen, kv.Key, "max_jobs")
			if n, ok := d.intVal(v, "max_jobs"); ok {
				if n < 1 {
					d.errorf(v, "max_jobs must be at least 1")
				} else {
					d.p.MaxJobs = n
				}
			}
		case "control":
			d.once(&d.seen.controlPos, kv.Key, "control")
			d.decodeControl(v)
		case "mcp":
			d.once(&d.seen.mcpPos, kv.Key, "mcp")
			d.decodeMCP(v)
		case "metrics":
			d.once(&d.seen.metricsPos, kv.Key, "metrics")
			d.decodeMetrics(v)
		case "ui":
			d.once(&d.seen.uiPos, kv.Key, "ui")
			d.decodeUI(v)
		case "llm":
			d.decodeLLM(v)
		case "replicate":
			d.once(&d.seen.replicatePos, kv.Key, "replicate")
			d.decodeReplicate(kv)
		case "stores":
			d.decodeStores(v)
		}
	}
	if versionNode == nil {
		d.errorf(body, "missing required key version: add `version: %d` at the top", Version)
	}
}

// once reports a top-level key that more than one file of a directory sets.
func (d *decoder) once(seen **Pos, key ast.Node, name string) {
	if *seen != nil {
		d.errorf(key, "%s is already set at %s; set it in one file only", name, **seen)
		return
	}
	p := d.pos(key)
	*seen = &p
}

func (d *decoder) syntaxError(err error) {
	var te interface {
		GetToken() *token.Token
		GetMessage() string
	}
	if errors.As(err, &te) && te.GetToken() != nil {
		tp := te.GetToken().Position
		d.errs = append(d.errs, &Error{Pos: Pos{File: d.file, Line: tp.Line, Column: tp.Column}, Msg: "invalid YAML: " + te.GetMessage()})
		return
	}
	d.errs = append(d.errs, &Error{Pos: Pos{File: d.file, Line: 1, Column: 1}, Msg: "invalid YAML: " + err.Error()})
}

func unwrap(n ast.Node) ast.Node {
	for {
		switch t := n.(type) {
		case *ast.AnchorNode:
			n = t.Value
		case *ast.TagNode:
			n = t.Value
		default:
			return n
		}
	}
}

// mapping returns the key/value pairs of a mapping node. An empty value (null) is an empty mapping.
func (d *decoder) mapping(n ast.Node, what string) ([]*ast.MappingValueNode, bool) {
	switch t := unwrap(n).(type) {
	case *ast.MappingNode:
		return t.Values, true
	case *ast.MappingValueNode:
		return []*ast.MappingValueNode{t}, true
	case *ast.NullNode, nil:
		return nil, true
	case *ast.AliasNode:
		d.errorf(n, "YAML aliases are not supported in policy files; repeat the value instead")
		return nil, false
	}
	d.errorf(n, "%s must be a mapping of key: value", what)
	return nil, false
}

func keyOf(kv *ast.MappingValueNode) string {
	if kv.Key == nil {
		return ""
	}
	if s, ok := kv.Key.(ast.ScalarNode); ok {
		return fmt.Sprint(s.GetValue())
	}
	return kv.Key.String()
}

// checkKeys reports unknown and duplicate keys. other maps a key that is valid
// elsewhere (another layout) to an explanation.
func (d *decoder) checkKeys(kvs []*ast.MappingValueNode, where string, allowed []string, other map[string]string) {
	seen := map[string]bool{}
	for _, kv := range kvs {
		k := keyOf(kv)
		if seen[k] {
			d.errorf(kv.Key, "duplicate key %q in %s", k, where)
			continue
		}
		seen[k] = true
		if slices.Contains(allowed, k) {
			continue
		}
		if why, ok := other[k]; ok {
			d.errorf(kv.Key, "key %q %s", k, why)
			continue
		}
		d.errorf(kv.Key, "unknown key %q in %s%s", k, where, suggest(k, allowed))
	}
}

func (d *decoder) scalar(n ast.Node) (ast.ScalarNode, bool) {
	s, ok := unwrap(n).(ast.ScalarNode)
	return s, ok
}

func (d *decoder) str(n ast.Node, field string) (string, bool) {
	switch t := unwrap(n).(type) {
	case *ast.StringNode:
		return t.Value, true
	case *ast.LiteralNode:
		return t.Value.Value, true
	case *ast.NullNode:
		return "", true
	}
	d.errorf(n, "%s must be a string, not %s", field, describe(n))
	return "", false
}

func (d *decoder) intVal(n ast.Node, field string) (int, bool) {
	if t, ok := unwrap(n).(*ast.IntegerNode); ok {
		switch v := t.Value.(type) {
		case int64:
			if v >= math.MinInt32 && v <= math.MaxInt32 {
				return int(v), true
			}
		case uint64:
			if v <= math.MaxInt32 {
				return int(v), true
			}
		}
		d.errorf(n, "%s is out of range", field)
		return 0, false
	}
	d.errorf(n, "%s must be an integer, not %s", field, describe(n))
	return 0, false
}

func (d *decoder) int64Val(n ast.Node, field string) (int64, bool) {
	if t, ok := unwrap(n).(*ast.IntegerNode); ok {
		switch v := t.Value.(type) {
		case int64:
			return v, true
		case uint64:
			if v <= math.MaxInt64 {
				return int64(v), true
			}
		}
	}
	d.errorf(n, "%s must be an integer, not %s", field, describe(n))
	return 0, false
}

func (d *decoder) floatVal(n ast.Node, field string) (float64, bool) {
	switch t := unwrap(n).(type) {
	case *ast.FloatNode:
		return t.Value, true
	case *ast.IntegerNode:
		switch v := t.Value.(type) {
		case int64:
			return float64(v), true
		case uint64:
			return float64(v), true
		}
	}
	d.errorf(n, "%s must be a number, not %s", field, describe(n))
	return 0, false
}

func (d *decoder) boolVal(n ast.Node, field string) (bool, bool) {
	if t, ok := unwrap(n).(*ast.BoolNode); ok {
		return t.Value, true
	}
	d.errorf(n, "%s must be true or false, not %s", field, describe(n))
	return false, false
}

func (d *decoder) size(n ast.Node, field string) (Size, bool) {
	switch t := unwrap(n).(type) {
	case *ast.IntegerNode:
		switch v := t.Value.(type) {
		case int64:
			if v >= 0 {
				return Size(v), true
			}
		case uint64:
			return Size(v), true
		}
	case *ast.StringNode:
		s, err := ParseSize(t.Value)
		if err == nil {
			return s, true
		}
		d.errorf(n, "%s: %v", field, err)
		return 0, false
	}
	d.errorf(n, "%s must be a size such as 100KiB, not %s", field, describe(n))
	return 0, false
}

func (d *decoder) duration(n ast.Node, field string) (time.Duration, bool) {
	switch t := unwrap(n).(type) {
	case *ast.IntegerNode:
		if fmt.Sprint(t.Value) == "0" { // int64 or uint64, depending on the parser
			return 0, true
		}
		d.errorf(n, "%s needs a unit, e.g. %vs or %vm", field, t.Value, t.Value)
		return 0, false
	case *ast.StringNode:
		v, err := ParseDuration(t.Value)
		if err == nil {
			return v, true
		}
		d.errorf(n, "%s: %v", field, err)
		return 0, false
	}
	d.errorf(n, "%s must be a duration such as 30s, not %s", field, describe(n))
	return 0, false
}

func describe(n ast.Node) string {
	switch t := unwrap(n).(type) {
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	case *ast.NullNode:
		return "an empty value"
	case ast.ScalarNode:
		return fmt.Sprintf("%q", fmt.Sprint(t.GetValue()))
	}
	return n.Type().String()
}

func (d *decoder) decodeControl(n ast.Node) {
	kvs, ok := d.mapping(n, "control")
	if !ok {
		return
	}
	d.checkKeys(kvs, "control", []string{"socket", "tcp", "token_file", "tokens", "max_request_body"}, nil)
	for _, kv := range kvs {
		switch keyOf(kv) {
		case "socket":
			if s, ok := d.str(kv.Value, "control.socket"); ok {
				d.p.Control.Socket = expandHome(s)
			}
		case "tcp":
			if s, ok := d.str(kv.Value, "control.tcp"); ok {
				host, _, err := net.SplitHostPort(s)
				ip := net.ParseIP(host)
				if err != nil || (host != "localhost" && (ip == nil || !ip.IsLoopback())) {
					d.errorf(kv.Value, "control.tcp must be a loopback address such as 127.0.0.1:7070, not %q", s)
				} else {
					d.p.Control.TCP = s
				}
			}
		case "token_file":
			if s, ok := d.str(kv.Value, "control.token_file"); ok {
				d.p.Control.TokenFile = expandHome(s)
			}
		case "max_request_body":
			if sz, ok := d.size(kv.Value, "control.max_request_body"); ok {
				if sz < 1024 {
					d.errorf(kv.Value, "control.max_request_body must be at least 1KiB")
				} else {
					d.p.Control.MaxRequestBody = sz
				}
			}
		case "tokens":
			d.decodeTokens(kv.Value)
		}
	}
}

var tokenKeys = []string{"name", "sha256", "stores", "owners", "rights"}

// decodeTokens reads control.tokens: scoped credentials, held hashed.
func (d *decoder) decodeTokens(n ast.Node) {
	seq, ok := unwrap(n).(*ast.SequenceNode)
	if !ok {
		d.errorf(n, "control.tokens must be a list of tokens (each item starts with `- name: ...`)")
		return
	}
	names := map[string]bool{}
	for _, item := range seq.Values {
		kvs, ok := d.mapping(item, "a token")
		if !ok {
			continue
		}
		t := Token{Pos: d.pos(item)}
		where := "control.tokens"
		d.checkKeys(kvs, where, tokenKeys, nil)
		for _, kv := range kvs {
			switch keyOf(kv) {
			case "name":
				if s, ok := d.str(kv.Value, where+" name"); ok {
					if names[s] {
						d.errorf(kv.Value, "token %q is defined twice", s)
					}
					names[s], t.Name = true, s
				}
			case "sha256":
				if s, ok := d.str(kv.Value, where+" sha256"); ok {
					s = strings.ToLower(strings.TrimSpace(s))
					if len(s) != 64 || strings.Trim(s, "0123456789abcdef") != "" {
						d.errorf(kv.Value, "sha256 must be the 64 hex digits of the token's SHA-256 (memwatch token new prints one), not the token itself")
					} else {
						t.SHA256 = s
					}
				}
			case "stores", "owners", "rights":
				list := d.strList(kv.Value, where+" "+keyOf(kv))
				switch keyOf(kv) {
				case "stores":
					t.Stores = list
				case "owners":
					t.Owners = list
				default:
					for _, r := range list {
						if r != RightRead && r != RightWrite && r != RightUndo {
							d.errorf(kv.Value, "right %q: want read, write or undo%s", r, suggest(r, []string{RightRead, RightWrite, RightUndo}))
						}
					}
					t.Rights = list
				}
			}
		}
		switch {
		case t.Name == "":
			d.errorf(item, "a token needs a name (it names the client in the log)")
		case t.SHA256 == "":
			d.errorf(item, "token %q needs sha256: the SHA-256 of the token (memwatch token new makes a token and prints it)", t.Name)
		case len(t.Stores) == 0 && len(t.Owners) == 0:
			d.errorf(item, "token %q reaches nothing: give it stores: [NAME, ...] or owners: [USER, ...]", t.Name)
		case len(t.Rights) == 0:
			d.errorf(item, "token %q has no rights: give it rights: [read] (and write, undo as needed)", t.Name)
		default:
			d.p.Control.Tokens = append(d.p.Control.Tokens, t)
		}
	}
}

// strList reads a list of strings (or one string).
func (d *decoder) strList(n ast.Node, field string) []string {
	var items []ast.Node
	switch t := unwrap(n).(type) {
	case *ast.SequenceNode:
		items = t.Values
	case *ast.StringNode:
		items = []ast.Node{t}
	default:
		d.errorf(n, "%s must be a list, such as [a, b], not %s", field, describe(n))
		return nil
	}
	var out []string
	for _, it := range items {
		if s, ok := d.str(it, field); ok {
			out = append(out, s)
		}
	}
	return out
}

func (d *decoder) decodeMetrics(n ast.Node) {
	kvs, ok := d.mapping(n, "metrics")
	if !ok {
		return
	}
	d.checkKeys(kvs, "metrics", []string{"listen"}, nil)
	for _, kv := range kvs {
		if keyOf(kv) != "listen" {
			continue
		}
		if s, ok := d.str(kv.Value, "metrics.listen"); ok {
			if _, port, err := net.SplitHostPort(s); err != nil || port == "" {
				d.errorf(kv.Value, "metrics.listen must be host:port, such as 127.0.0.1:9464, not %q", s)
			} else {
				d.p.Metrics.Listen = s
			}
		}
	}
}

func (d *decoder) decodeUI(n ast.Node) {
	kvs, ok := d.mapping(n, "ui")
	if !ok {
		return
	}
	d.checkKeys(kvs, "ui", []string{"enabled"}, nil)
	for _, kv := range kvs {
		if keyOf(kv) == "enabled" {
			if b, ok := d.boolVal(kv.Value, "ui.enabled"); ok {
				d.p.UI.Enabled = b
			}
		}
	}
}

func (d *decoder) decodeMCP(n ast.Node) {
	kvs, ok := d.mapping(n, "mcp")
	if !ok {
		return
	}
	d.checkKeys(kvs, "mcp", []string{"allow_undo", "read_only", "max_sessions", "session_idle"}, nil)
	for _, kv := range kvs {
		switch keyOf(kv) {
		case "allow_undo":
			if b, ok := d.boolVal(kv.Value, "mcp.allow_undo"); ok {
				d.p.MCP.AllowUndo = b
			}
		case "read_only":
			if b, ok := d.boolVal(kv.Value, "mcp.read_only"); ok {
				d.p.MCP.ReadOnly = b
			}
		case "max_sessions":
			if n, ok := d.intVal(kv.Value, "mcp.max_sessions"); ok {
				if n < 1 {
					d.errorf(kv.Value, "mcp.max_sessions must be at least 1")
				} else {
					d.p.MCP.MaxSessions = n
				}
			}
		case "session_idle":
			if t, ok := d.duration(kv.Value, "mcp.session_idle"); ok {
				if t < time.Second {
					d.errorf(kv.Value, "mcp.session_idle must be at least 1s")
				} else {
					d.p.MCP.SessionIdle = t
				}
			}
		}
	}
}

var endpointKeys = []string{"base_url", "model", "api_key_env", "api_key_file", "timeout", "max_concurrency",
	"temperature", "max_output_tokens", "max_input_tokens", "daily_token_budget", "headers"}

func (d *decoder) decodeLLM(n ast.Node) {
	kvs, ok := d.mapping(n, "llm")
	if !ok {
		return
	}
	for _, kv := range kvs {
		name := keyOf(kv)
		if prev, dup := d.seen.endpoints[name]; dup {
			d.errorf(kv.Key, "llm endpoint %q is already defined at %s", name, prev)
			continue
		}
		d.seen.endpoints[name] = d.pos(kv.Key)
		ep := &Endpoint{Name: name, Timeout: 30 * time.Second, MaxConcurrency: 2, Temperature: 0.2,
			MaxInputTokens: 8000, DailyTokenBudget: 200_000, Pos: d.pos(kv.Key)}
		fields, ok := d.mapping(kv.Value, "llm."+name)
		if !ok {
			continue
		}
		where := "llm." + name
		d.checkKeys(fields, where, endpointKeys, nil)
		has := map[string]bool{}
		for _, f := range fields {
			k, v := keyOf(f), f.Value
			has[k] = true
			field := where + "." + k
			switch k {
			case "base_url":
				if s, ok := d.str(v, field); ok {
					u, err := url.Parse(s)
					if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
						d.errorf(v, "%s must be an http(s) URL such as http://127.0.0.1:11434/v1", field)
					} else {
						ep.BaseURL = s
					}
				}
			case "model":
				ep.Model, _ = d.str(v, field)
			case "api_key_env":
				ep.APIKeyEnv, _ = d.str(v, field)
			case "api_key_file":
				if s, ok := d.str(v, field); ok {
					ep.APIKeyFile = expandHome(s)
					if fi, err := os.Stat(ep.APIKeyFile); err != nil {
						d.errorf(v, "%s: cannot read %s: %v", field, ep.APIKeyFile, errors.Unwrap(err))
					} else if fi.Mode().Perm()&0o077 != 0 {
						d.errorf(v, "%s: %s is readable by group or others (mode %04o); run chmod 600 %s", field, ep.APIKeyFile, fi.Mode().Perm(), ep.APIKeyFile)
					}
				}
			case "timeout":
				if t, ok := d.duration(v, field); ok {
					if t <= 0 {
						d.errorf(v, "%s must be positive", field)
					} else {
						ep.Timeout = t
					}
				}
			case "max_concurrency":
				if i, ok := d.intVal(v, field); ok {
					if i < 1 {
						d.errorf(v, "%s must be at least 1", field)
					} else {
						ep.MaxConcurrency = i
					}
				}
			case "temperature":
				if t, ok := d.floatVal(v, field); ok {
					if t < 0 || t > 2 {
						d.errorf(v, "%s must be between 0 and 2", field)
					} else {
						ep.Temperature = t
					}
				}
			case "max_output_tokens":
				if i, ok := d.intVal(v, field); ok {
					ep.MaxOutputTokens = i
				}
			case "max_input_tokens":
				if i, ok := d.intVal(v, field); ok {
					if i < 256 {
						d.errorf(v, "%s must be at least 256", field)
					} else {
						ep.MaxInputTokens = i
					}
				}
			case "daily_token_budget":
				if i, ok := d.int64Val(v, field); ok {
					if i < 1 {
						d.errorf(v, "%s must be at least 1: the budget is a hard cap and cannot be switched off", field)
					} else {
						ep.DailyTokenBudget = i
					}
				}
			case "headers":
				hs, ok := d.mapping(v, field)
				if !ok {
					continue
				}
				ep.Headers = map[string]string{}
				for _, h := range hs {
					if s, ok := d.str(h.Value, field+"."+keyOf(h)); ok {
						ep.Headers[keyOf(h)] = s
					}
				}
			}
		}
		if !has["base_url"] {
			d.errorf(kv.Key, "missing required key base_url in %s", where)
		}
		if !has["model"] {
			d.errorf(kv.Key, "missing required key model in %s", where)
		}
		if has["api_key_env"] && has["api_key_file"] {
			d.errorf(kv.Key, "%s sets both api_key_env and api_key_file; keep one", where)
		}
		d.p.LLM[name] = ep
	}
}

var replicateKeys = []string{"url", "endpoint", "region", "access_key_env", "secret_key_env", "access_key_file", "secret_key_file", "force_path_style", "retention", "sync_interval"}

// decodeReplicate reads replicate: the bucket the state is copied to.
func (d *decoder) decodeReplicate(kv *ast.MappingValueNode) {
	fields, ok := d.mapping(kv.Value, "replicate")
	if !ok {
		return
	}
	d.checkKeys(fields, "replicate", replicateKeys, nil)
	r := &Replicate{Region: "us-east-1", Retention: 72 * time.Hour, SyncInterval: time.Second, Pos: d.pos(kv.Key)}
	has := map[string]ast.Node{}
	for _, f := range fields {
		k, v := keyOf(f), f.Value
		has[k] = v
		field := "replicate." + k
		switch k {
		case "url":
			if s, ok := d.str(v, field); ok {
				u, err := url.Parse(s)
				if err != nil || u.Scheme != "s3" || u.Host == "" || u.User != nil || u.RawQuery != "" {
					d.errorf(v, "%s must be s3://BUCKET/PREFIX (the bucket, then where in it the state goes)", field)
				} else {
					r.URL, r.Bucket, r.Prefix = s, u.Host, strings.Trim(u.Path, "/")
				}
			}
		case "endpoint":
			if s, ok := d.str(v, field); ok {
				u, err := url.Parse(s)
				if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
					d.errorf(v, "%s must be an http(s) URL such as http://127.0.0.1:9000 (no credentials in it: use access_key_env)", field)
				} else {
					r.Endpoint = strings.TrimRight(s, "/")
				}
			}
		case "region":
			r.Region, _ = d.str(v, field)
		case "access_key_env":
			r.AccessKeyEnv, _ = d.str(v, field)
		case "secret_key_env":
			r.SecretKeyEnv, _ = d.str(v, field)
		case "access_key_file", "secret_key_file":
			if s, ok := d.str(v, field); ok {
				path := expandHome(s)
				if fi, err := os.Stat(path); err != nil {
					d.errorf(v, "%s: cannot read %s: %v", field, path, errors.Unwrap(err))
				} else if fi.Mode().Perm()&0o077 != 0 {
					d.errorf(v, "%s: %s is readable by group or others (mode %04o); run chmod 600 %s", field, path, fi.Mode().Perm(), path)
				}
				if k == "access_key_file" {
					r.AccessKeyFile = path
				} else {
					r.SecretKeyFile = path
				}
			}
		case "force_path_style":
			r.ForcePathStyle, _ = d.boolVal(v, field)
		case "retention":
			if t, ok := d.duration(v, field); ok {
				if t < time.Hour {
					d.errorf(v, "%s must be at least 1h (snapshots older than it are deleted from the bucket)", field)
				} else {
					r.Retention = t
				}
			}
		case "sync_interval":
			if t, ok := d.duration(v, field); ok {
				if t < 50*time.Millisecond || t > time.Minute {
					d.errorf(v, "%s must be between 50ms and 1m (how far the bucket may be behind)", field)
				} else {
					r.SyncInterval = t
				}
			}
		}
	}
	if has["url"] == nil {
		d.errorf(kv.Key, "missing required key url in replicate: s3://BUCKET/PREFIX")
	}
	for _, pair := range [][2]string{{"access_key_env", "access_key_file"}, {"secret_key_env", "secret_key_file"}} {
		if has[pair[0]] != nil && has[pair[1]] != nil {
			d.errorf(has[pair[1]], "replicate sets both %s and %s; keep one", pair[0], pair[1])
		}
	}
	access := has["access_key_env"] != nil || has["access_key_file"] != nil
	secret := has["secret_key_env"] != nil || has["secret_key_file"] != nil
	if access != secret {
		d.errorf(kv.Key, "replicate names an access key without a secret, or a secret without an access key: give both (access_key_env and secret_key_env, or the _file keys), or neither for the AWS SDK's default chain")
	}
	d.p.Replicate = r
}

var storeKeys = []string{"name", "preset", "layout", "paths", "compactor", "llm", "settle", "cooldown", "sweep", "max_loss",
	"max_file_size", "max_line", "max_read", "max_watches", "allow_undo", "user", "group", "archive_keep", "archive_max_age", "archive_max_bytes", "compress_after",
	"versions", "versions_keep", "versions_max_age", "versions_max_bytes", "shrink_warn", "restore_deleted"}

func (d *decoder) decodeStores(n ast.Node) {
	seq, ok := unwrap(n).(*ast.SequenceNode)
	if !ok {
		if _, null := unwrap(n).(*ast.NullNode); null {
			return
		}
		d.errorf(n, "stores must be a list of stores (each item starts with `- name: ...`)")
		return
	}
	for _, item := range seq.Values {
		if s := d.decodeStore(item); s != nil {
			d.p.Stores = append(d.p.Stores, s)
		}
	}
}

func (d *decoder) decodeStore(n ast.Node) *Store {
	kvs, ok := d.mapping(n, "a store")
	if !ok {
		return nil
	}
	s := &Store{Compactor: "heuristic", LLM: "default", Settle: 500 * time.Millisecond,
		Cooldown: 5 * time.Minute, Sweep: time.Hour, MaxLoss: 0.25, MaxFileSize: DefaultMaxFileSize, MaxLine: DefaultMaxLine,
		MaxRead: DefaultMaxRead, MaxWatches: DefaultMaxWatches, AllowUndo: true, Pos: d.pos(n),
		Versions: true, VersionsKeep: DefaultVersionsKeep, VersionsMaxBytes: DefaultVersionsMaxBytes, ShrinkWarn: DefaultShrinkWarn}
	byKey := map[string]*ast.MappingValueNode{}
	for _, kv := range kvs {
		byKey[keyOf(kv)] = kv
	}
	// A preset names the layout, default paths and options of an agent.
	var preset *Preset
	if kv, ok := byKey["preset"]; ok {
		if name, ok := d.str(kv.Value, "preset"); ok {
			if p, known := Presets[name]; known {
				preset = &p
				s.Preset = name
			} else {
				d.errorf(kv.Value, "unknown preset %q: want one of %s%s", name, strings.Join(PresetNames(), ", "), suggest(name, PresetNames()))
			}
		}
	}
	// The layout decides which flat keys are valid, so read it first.
	var keys []string
	setLayout := func(name string) {
		spec, _ := d.layout(name)
		s.Layout = name
		s.Options = spec.NewOptions()
		keys = optionKeys(spec)
	}
	layouts := d.layoutNames()
	if kv, ok := byKey["layout"]; ok {
		if l, ok := d.str(kv.Value, "layout"); ok {
			if _, known := d.layout(l); !known {
				d.errorf(kv.Value, "unknown layout %q: want one of %s%s", l, strings.Join(layouts, ", "), suggest(l, layouts))
			} else {
				setLayout(l)
			}
		}
		if preset != nil && s.Layout != "" && s.Layout != preset.Layout {
			d.errorf(kv.Value, "preset %s uses layout %s, not %s: drop one of them", preset.Name, preset.Layout, s.Layout)
		}
	} else if preset != nil {
		if _, known := d.layout(preset.Layout); known {
			setLayout(preset.Layout)
		}
	} else {
		d.errorf(n, "missing required key layout (one of %s) or preset (one of %s)", strings.Join(layouts, ", "), strings.Join(PresetNames(), ", "))
	}
	allowed := append(slices.Clone(storeKeys), keys...)
	if preset != nil && s.Layout == preset.Layout {
		for k, v := range preset.Options {
			setOption(s.Options, k, v)
		}
		if _, given := byKey["paths"]; !given {
			for _, g := range preset.Paths {
				s.Paths = append(s.Paths, filepath.Clean(expandHome(g)))
			}
		}
	}
	other := map[string]string{}
	if s.Layout != "" {
		for _, l := range d.layouts {
			for _, k := range optionKeys(l) {
				if !slices.Contains(allowed, k) {
					other[k] = fmt.Sprintf("belongs to layout %s, not %s", l.Name, s.Layout)
				}
			}
		}
	}
	where := "store"
	if kv, ok := byKey["name"]; ok {
		if name, ok := d.scalar(kv.Value); ok {
			where = fmt.Sprintf("store %q", fmt.Sprint(name.GetValue()))
		}
	}
	if s.Layout != "" || byKey["layout"] == nil {
		d.checkKeys(kvs, where, allowed, other)
	}
	for _, kv := range kvs {
		k, v := keyOf(kv), kv.Value
		switch k {
		case "layout", "preset":
		case "name":
			if name, ok := d.str(v, "name"); ok {
				if !storeNameRE.MatchString(name) {
					d.errorf(v, "store name %q must be lowercase letters, digits, '.', '_' or '-' (it is used in API paths)", name)
					continue
				}
				if prev, dup := d.seen.stores[name]; dup {
					d.errorf(v, "store %q is already defined at %s", name, prev)
					continue
				}
				d.seen.stores[name] = d.pos(v)
				s.Name = name
			}
		case "paths":
			s.Paths = d.globs(v)
		case "compactor":
			if c, ok := d.str(v, "compactor"); ok {
				if c != "heuristic" && c != "llm" {
					d.errorf(v, "compactor must be heuristic or llm, not %q%s", c, suggest(c, []string{"heuristic", "llm"}))
				} else {
					s.Compactor = c
				}
			}
		case "llm":
			if c, ok := d.str(v, "llm"); ok {
				s.LLM = c
			}
		case "settle":
			if t, ok := d.duration(v, "settle"); ok {
				if t <= 0 {
					d.errorf(v, "settle must be positive, e.g. 500ms")
				} else {
					s.Settle = t
				}
			}
		case "cooldown":
			if t, ok := d.duration(v, "cooldown"); ok {
				s.Cooldown = t
			}
		case "sweep":
			if t, ok := d.duration(v, "sweep"); ok {
				if t != 0 && t < time.Minute {
					d.errorf(v, "sweep must be 0 (off) or at least 1m")
				} else {
					s.Sweep = t
				}
			}
		case "max_loss":
			s.MaxLoss = d.fraction(v, "max_loss")
		case "max_file_size", "max_line":
			if sz, ok := d.size(v, k); ok {
				if sz < 1024 {
					d.errorf(v, "%s must be at least 1KiB", k)
				} else if k == "max_file_size" {
					s.MaxFileSize = sz
				} else {
					s.MaxLine = sz
				}
			}
		case "max_read":
			if sz, ok := d.size(v, k); ok {
				if sz < 64<<10 {
					d.errorf(v, "max_read must be at least 64KiB")
				} else {
					s.MaxRead = sz
				}
			}
		case "max_watches":
			if n, ok := d.intVal(v, k); ok {
				if n < 1 {
					d.errorf(v, "max_watches must be at least 1 (beyond it a root is polled)")
				} else {
					s.MaxWatches = n
				}
			}
		case "allow_undo":
			if b, ok := d.boolVal(v, k); ok {
				s.AllowUndo = b
			}
		case "archive_keep":
			if n, ok := d.intVal(v, k); ok {
				if n < 0 {
					d.errorf(v, "archive_keep must be 0 (keep all) or more")
				} else {
					s.ArchiveKeep = n
				}
			}
		case "archive_max_age", "compress_after":
			if t, ok := d.duration(v, k); ok {
				if k == "archive_max_age" {
					s.ArchiveMaxAge = t
				} else {
					s.CompressAfter = t
				}
			}
		case "versions", "restore_deleted":
			if b, ok := d.boolVal(v, k); ok {
				if k == "versions" {
					s.Versions = b
				} else {
					s.RestoreDeleted = b
				}
			}
		case "versions_keep":
			if n, ok := d.intVal(v, k); ok {
				if n < 0 {
					d.errorf(v, "versions_keep must be 0 (keep all) or more")
				} else {
					s.VersionsKeep = n
				}
			}
		case "versions_max_age":
			if t, ok := d.duration(v, k); ok {
				s.VersionsMaxAge = t
			}
		case "versions_max_bytes":
			if sz, ok := d.size(v, k); ok {
				s.VersionsMaxBytes = sz
			}
		case "shrink_warn":
			if f, ok := d.floatVal(v, k); ok {
				if f <= 0 || f > 1 {
					d.errorf(v, "shrink_warn must be a share of a file's lines above 0 and at most 1, e.g. 0.5")
				} else {
					s.ShrinkWarn = f
				}
			}
		case "archive_max_bytes":
			if sz, ok := d.size(v, k); ok {
				s.ArchiveMaxBytes = sz
			}
		case "user", "group":
			if name, ok := d.str(v, k); ok {
				if k == "user" {
					s.User = name
				} else {
					s.Group = name
				}
			}
		default:
			if s.Options != nil && slices.Contains(keys, k) {
				d.option(v, s.Options, k)
			}
		}
	}
	if _, ok := byKey["name"]; !ok {
		d.errorf(n, "missing required key name in store")
	}
	if _, ok := byKey["paths"]; !ok && preset == nil {
		d.errorf(n, "missing required key paths in %s: at least one glob of store roots", where)
	}
	if s.Name == "" || s.Layout == "" {
		return nil
	}
	return s
}

func (d *decoder) fraction(n ast.Node, field string) float64 {
	var f float64
	switch t := unwrap(n).(type) {
	case *ast.StringNode:
		v := strings.TrimSpace(t.Value)
		if !strings.HasSuffix(v, "%") {
			d.errorf(n, "%s must be a percentage such as 25%% or a fraction such as 0.25", field)
			return 0.25
		}
		if _, err := fmt.Sscanf(strings.TrimSuffix(v, "%"), "%g", &f); err != nil {
			d.errorf(n, "%s must be a percentage such as 25%%", field)
			return 0.25
		}
		f /= 100
	case *ast.FloatNode:
		f = t.Value
	case *ast.IntegerNode:
		fmt.Sscan(fmt.Sprint(t.Value), &f)
	default:
		d.errorf(n, "%s must be a percentage such as 25%%, not %s", field, describe(n))
		return 0.25
	}
	if f < 0 || f > 1 {
		d.errorf(n, "%s must be between 0%% and 100%%", field)
		return 0.25
	}
	return f
}

func (d *decoder) globs(n ast.Node) []string {
	var items []ast.Node
	switch t := unwrap(n).(type) {
	case *ast.SequenceNode:
		items = t.Values
	case *ast.StringNode:
		items = []ast.Node{t}
	default:
		d.errorf(n, "paths must be a list of globs, not %s", describe(n))
		return nil
	}
	if len(items) == 0 {
		d.errorf(n, "paths needs at least one glob")
	}
	var out []string
	for _, it := range items {
		g, ok := d.str(it, "paths")
		if !ok {
			continue
		}
		g = expandHome(g)
		if !filepath.IsAbs(g) {
			d.errorf(it, "path %q must be absolute (or start with ~/)", g)
			continue
		}
		if _, err := filepath.Match(g, ""); err != nil {
			d.errorf(it, "bad glob %q: %v", g, err)
			continue
		}
		out = append(out, filepath.Clean(g))
	}
	return out
}
