package policy

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/memwatch/memwatch/control"
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
	seen := newMergeState()
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
	d := &decoder{file: name, p: p, seen: newMergeState(), layouts: layouts}
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
	// A policy says what memwatch touches, as root too: only one no other
	// user could have written (an environment's MEMWATCH_POLICY may be
	// a user's, handed to root by sudo -E).
	if err := control.CheckOwned(path); err != nil {
		return nil, fmt.Errorf("refusing the policy: %w", err)
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
		if !control.IsPolicyFile(e) {
			continue
		}
		f := filepath.Join(path, e.Name())
		if err := control.CheckOwned(f); err != nil {
			return nil, fmt.Errorf("refusing the policy: %w", err)
		}
		files = append(files, f)
	}
	sort.Strings(files)
	return files, nil
}

// mergeState remembers where names were defined across the files of a directory.
type mergeState struct {
	stores map[string]Pos // store names
	named  map[string]Pos // llm endpoints, as llm.NAME
	top    map[string]Pos // top-level keys
}

func newMergeState() *mergeState {
	return &mergeState{stores: map[string]Pos{}, named: map[string]Pos{}, top: map[string]Pos{}}
}
