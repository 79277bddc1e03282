package compact

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// ErrUnparseable means none of the three tiers found the fields.
var ErrUnparseable = errors.New("model output is not the JSON asked for")

// ParseFields extracts string (or number) fields from a model's JSON answer
// with memory-history's three tiers, since many endpoints ignore response_format:
//  1. strip markdown fences and parse the whole text;
//  2. parse the first balanced {...} block;
//  3. pull each field out with a regular expression.
//
// It returns the fields found and the tier that found them (1..3). Fields
// that are absent come back as "" when at least one field was found.
func ParseFields(text string, fields ...string) (map[string]string, int, error) {
	if m, ok := parseObject(StripFences(text), fields); ok {
		return m, 1, nil
	}
	if blk, ok := firstObject(text); ok {
		if m, ok := parseObject(blk, fields); ok {
			return m, 2, nil
		}
	}
	m := map[string]string{}
	found := false
	for _, f := range fields {
		if v, ok := regexField(text, f); ok {
			m[f] = v
			found = true
		}
	}
	if found {
		return m, 3, nil
	}
	return nil, 0, fmt.Errorf("%w (fields %s)", ErrUnparseable, strings.Join(fields, ", "))
}

// StripFences removes a Markdown code fence an LLM wrapped its reply in.
func StripFences(s string) string {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "```") {
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
		s = strings.TrimSuffix(strings.TrimSpace(s), "```")
	}
	return strings.TrimSpace(s)
}

func parseObject(s string, fields []string) (map[string]string, bool) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return nil, false
	}
	m := map[string]string{}
	found := false
	for _, f := range fields {
		v, ok := raw[f]
		if !ok {
			continue
		}
		found = true
		var str string
		if err := json.Unmarshal(v, &str); err == nil {
			m[f] = str
			continue
		}
		if string(v) != "null" {
			m[f] = string(v) // numbers and objects as their JSON text
		}
	}
	return m, found
}

// firstObject returns the first balanced {...} block, ignoring braces in strings.
func firstObject(s string) (string, bool) {
	start := strings.IndexByte(s, '{')
	if start < 0 {
		return "", false
	}
	depth, inStr, esc := 0, false, false
	for i := start; i < len(s); i++ {
		c := s[i]
		switch {
		case esc:
			esc = false
		case inStr && c == '\\':
			esc = true
		case c == '"':
			inStr = !inStr
		case inStr:
		case c == '{':
			depth++
		case c == '}':
			depth--
			if depth == 0 {
				return s[start : i+1], true
			}
		}
	}
	return "", false
}

func regexField(text, field string) (string, bool) {
	q := regexp.QuoteMeta(field)
	str := regexp.MustCompile(`"` + q + `"\s*:\s*"((?:[^"\\]|\\.)*)"`)
	if m := str.FindStringSubmatch(text); m != nil {
		var v string
		if err := json.Unmarshal([]byte(`"`+m[1]+`"`), &v); err == nil {
			return v, true
		}
		return m[1], true
	}
	// A string cut off by truncated output: take what is there.
	open := regexp.MustCompile(`"` + q + `"\s*:\s*"((?:[^"\\]|\\.)*)$`)
	if m := open.FindStringSubmatch(text); m != nil {
		return strings.ReplaceAll(strings.ReplaceAll(m[1], `\n`, "\n"), `\"`, `"`), true
	}
	num := regexp.MustCompile(`"` + q + `"\s*:\s*(-?[0-9]+(?:\.[0-9]+)?)`)
	if m := num.FindStringSubmatch(text); m != nil {
		return m[1], true
	}
	return "", false
}
