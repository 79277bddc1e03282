package policy

// The policy reference (docs/policy.md, between markers) is made from the
// declarations by Reference, here beside the test that compares it
// (TestReadmeReference): nothing but that test calls it.

import (
	"fmt"
	"reflect"
	"strings"
)

// Reference is the policy reference in Markdown, from the declarations:
// a table of keys per section, then each layout's options (their
// defaults are the layout's). docs/policy.md holds it between markers, and a
// test fails when it differs.
func Reference(layouts []LayoutSpec) string {
	var b strings.Builder
	table := func(title, intro string, v reflect.Value) {
		fmt.Fprintf(&b, "\n**%s**%s\n\n| key | type | default | allowed | what |\n|---|---|---|---|---|\n", title, intro)
		for _, f := range declFields(v.Type()) {
			def := code(defaultText(f, v.FieldByIndex(f.Index)))
			if _, req := f.Tag.Lookup("required"); req || declKey(f) == "version" {
				def = "required"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", declKey(f), typeName(f), def, allowedText(f), f.Tag.Get("doc"))
		}
	}
	p := Default()
	table("Top level", "", reflect.ValueOf(p).Elem())
	table("control", "", reflect.ValueOf(&p.Control).Elem())
	tok := Token{}
	table("control.tokens", ": each item", reflect.ValueOf(&tok).Elem())
	table("metrics", "", reflect.ValueOf(&p.Metrics).Elem())
	table("ui", "", reflect.ValueOf(&p.UI).Elem())
	table("mcp", "", reflect.ValueOf(&p.MCP).Elem())
	ep := &Endpoint{}
	setDefaults(reflect.ValueOf(ep).Elem())
	table("llm.NAME", ": each endpoint", reflect.ValueOf(ep).Elem())
	rep := &Replicate{}
	setDefaults(reflect.ValueOf(rep).Elem())
	table("replicate", "", reflect.ValueOf(rep).Elem())
	fl := &Fleet{}
	setDefaults(reflect.ValueOf(fl).Elem())
	table("fleet", ": a central node (every host replicates to fleet.url/<host>)", reflect.ValueOf(fl).Elem())
	st := &Store{}
	setDefaults(reflect.ValueOf(st).Elem())
	table("stores", ": each store (a preset, or a layout and paths)", reflect.ValueOf(st).Elem())
	for _, l := range layouts {
		table(l.Name, " options (keys of a store of this layout)", reflect.ValueOf(l.NewOptions()).Elem())
	}
	return b.String()
}

func code(s string) string {
	if s == "" {
		return ""
	}
	return "`" + s + "`"
}

// typeName says how a key's value is written.
func typeName(f reflect.StructField) string {
	t := f.Type
	switch {
	case t == sizeType:
		return "size"
	case t == durationType:
		return "duration"
	case f.Tag.Get("kind") == "fraction":
		return "percentage"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int64:
		return "integer"
	case reflect.Float64:
		return "number"
	case reflect.Bool:
		return "true/false"
	case reflect.String:
		switch f.Tag.Get("path") {
		case "home":
			return "path"
		case "local":
			return "path in the root"
		case "glob":
			return "glob in the root"
		case "anyglob":
			return "glob"
		}
		return "string"
	case reflect.Slice:
		if e := t.Elem(); e.Kind() == reflect.Struct || e.Kind() == reflect.Pointer && e.Elem().Kind() == reflect.Struct {
			return "list of sections"
		}
		if f.Tag.Get("path") == "globs" {
			return "list of globs"
		}
		return "list"
	case reflect.Map:
		if t.Elem().Kind() == reflect.Pointer {
			return "mapping of sections"
		}
		return "mapping"
	}
	return "section"
}

// defaultText is a key's default as a policy writes it ("" for none worth
// saying: an empty string, a section, false).
func defaultText(f reflect.StructField, v reflect.Value) string {
	if def, ok := f.Tag.Lookup("default"); ok {
		return def
	}
	return valueText(v)
}

// allowedText says a key's bounds or values.
func allowedText(f reflect.StructField) string {
	if e := f.Tag.Get("enum"); e != "" {
		return strings.ReplaceAll(e, "|", ", ")
	}
	minT, hasMin := f.Tag.Lookup("min")
	maxT, hasMax := f.Tag.Lookup("max")
	var s string
	switch {
	case minT == ">0" && hasMax:
		s = "> 0, ≤ " + maxT
	case minT == ">0":
		s = "> 0"
	case hasMin && hasMax:
		s = minT + " to " + maxT
	case hasMin:
		s = "≥ " + minT
	case hasMax:
		s = "≤ " + maxT
	}
	if z := f.Tag.Get("zero"); z != "" && s != "" {
		s = "0 (" + z + ") or " + s
	}
	return s
}
