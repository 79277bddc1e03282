package policy

// Reading the YAML syntax tree's nodes: each value as a type, with the
// file, line and column of what is wrong with it.

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"
)

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
		return parsed(d, n, field, t.Value, ParseSize)
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
		return parsed(d, n, field, t.Value, ParseDuration)
	}
	d.errorf(n, "%s must be a duration such as 30s, not %s", field, describe(n))
	return 0, false
}

// parsed reads a value written with its unit (100KiB, 30s), reporting
// the parser's error at the node.
func parsed[T any](d *decoder, n ast.Node, field, text string, parse func(string) (T, error)) (T, bool) {
	v, err := parse(text)
	if err != nil {
		d.errorf(n, "%s: %v", field, err)
		return v, false
	}
	return v, true
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

// items reads a list's items; one string stands for a list of one.
func (d *decoder) items(n ast.Node, field, want string) ([]ast.Node, bool) {
	switch t := unwrap(n).(type) {
	case *ast.SequenceNode:
		return t.Values, true
	case *ast.StringNode:
		return []ast.Node{t}, true
	}
	d.errorf(n, "%s must be %s, not %s", field, want, describe(n))
	return nil, false
}

// strList reads a list of strings (or one string).
func (d *decoder) strList(n ast.Node, field string) []string {
	items, ok := d.items(n, field, "a list, such as [a, b]")
	if !ok {
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

func (d *decoder) fraction(n ast.Node, field string) (float64, bool) {
	var f float64
	switch t := unwrap(n).(type) {
	case *ast.StringNode:
		v := strings.TrimSpace(t.Value)
		if !strings.HasSuffix(v, "%") {
			d.errorf(n, "%s must be a percentage such as 25%% or a fraction such as 0.25", field)
			return 0, false
		}
		if _, err := fmt.Sscanf(strings.TrimSuffix(v, "%"), "%g", &f); err != nil {
			d.errorf(n, "%s must be a percentage such as 25%%", field)
			return 0, false
		}
		f /= 100
	case *ast.FloatNode:
		f = t.Value
	case *ast.IntegerNode:
		fmt.Sscan(fmt.Sprint(t.Value), &f)
	default:
		d.errorf(n, "%s must be a percentage such as 25%%, not %s", field, describe(n))
		return 0, false
	}
	if f < 0 || f > 1 {
		d.errorf(n, "%s must be between 0%% and 100%%", field)
		return 0, false
	}
	return f, true
}

func (d *decoder) globs(n ast.Node, field string) []string {
	items, ok := d.items(n, field, "a list of globs")
	if !ok {
		return nil
	}
	if len(items) == 0 {
		d.errorf(n, "%s needs at least one glob", field)
	}
	var out []string
	for _, it := range items {
		g, ok := d.str(it, field)
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
		if strings.Contains(g, "[!") {
			d.errorf(it, "bad glob %q: [!...] is no negation here (it is the class of ! and the rest); write [^...]", g)
			continue
		}
		out = append(out, filepath.Clean(g))
	}
	return out
}
