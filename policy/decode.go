package policy

import (
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

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
	var versionNode ast.Node
	handled := map[string]func(*ast.MappingValueNode){
		"version": func(kv *ast.MappingValueNode) {
			versionNode = kv.Key
			if n, ok := d.intVal(kv.Value, "version"); ok && n != Version {
				d.errorf(kv.Value, "unsupported policy version %d: this memwatch reads version %d", n, Version)
			}
		},
		"stores": func(kv *ast.MappingValueNode) { d.decodeStores(kv.Value) },
	}
	for _, kv := range top {
		if k := keyOf(kv); k != "llm" && k != "stores" && k != "version" {
			// A directory's files each set their own keys; a key set in
			// two of them is an error, not a silent override.
			if prev, dup := d.seen.top[k]; dup {
				d.errorf(kv.Key, "%s is already set at %s; set it in one file only", k, prev)
				handled[k] = func(*ast.MappingValueNode) {}
				continue
			}
			d.seen.top[k] = d.pos(kv.Key)
		}
	}
	d.section(body, body, "top level", "", []reflect.Value{reflect.ValueOf(d.p).Elem()}, handled, nil)
	if versionNode == nil {
		d.errorf(body, "missing required key version: add `version: %d` at the top", Version)
	}
}

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
	s := &Store{Pos: d.pos(n)}
	setDefaults(reflect.ValueOf(s).Elem())
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
	layouts := d.layoutNames()
	layoutName := ""
	if kv, ok := byKey["layout"]; ok {
		if l, ok := d.str(kv.Value, "layout"); ok {
			if _, known := d.layout(l); !known {
				d.errorf(kv.Value, "unknown layout %q: want one of %s%s", l, strings.Join(layouts, ", "), suggest(l, layouts))
			} else {
				layoutName = l
			}
		}
		if preset != nil && layoutName != "" && layoutName != preset.Layout {
			d.errorf(kv.Value, "preset %s uses layout %s, not %s: drop one of them", preset.Name, preset.Layout, layoutName)
		}
	} else if preset != nil {
		if _, known := d.layout(preset.Layout); known {
			layoutName = preset.Layout
		}
	} else {
		d.errorf(n, "missing required key layout (one of %s) or preset (one of %s)", strings.Join(layouts, ", "), strings.Join(PresetNames(), ", "))
	}
	targets := []reflect.Value{reflect.ValueOf(s).Elem()}
	other := map[string]string{}
	if layoutName != "" {
		spec, _ := d.layout(layoutName)
		s.Layout, s.Options = layoutName, spec.NewOptions()
		targets = append(targets, reflect.ValueOf(s.Options).Elem())
		if preset != nil && layoutName == preset.Layout {
			for k, v := range preset.Options {
				setOption(s.Options, k, v)
			}
			if _, given := byKey["paths"]; !given {
				for _, g := range preset.Paths {
					s.Paths = append(s.Paths, filepath.Clean(expandHome(g)))
				}
			}
		}
		for _, l := range d.layouts {
			for _, k := range optionKeys(l) {
				if !slices.Contains(optionKeys(spec), k) {
					other[k] = fmt.Sprintf("belongs to layout %s, not %s", l.Name, s.Layout)
				}
			}
		}
	} else if byKey["layout"] != nil {
		return nil // the layout's error says it; its keys cannot be checked
	}
	where := "store"
	if kv, ok := byKey["name"]; ok {
		if name, ok := d.scalar(kv.Value); ok {
			where = fmt.Sprintf("store %q", fmt.Sprint(name.GetValue()))
		}
	}
	noop := func(*ast.MappingValueNode) {}
	d.section(n, n, where, "", targets, map[string]func(*ast.MappingValueNode){
		"layout": noop, "preset": noop,
		"name": func(kv *ast.MappingValueNode) {
			f, _ := reflect.TypeFor[Store]().FieldByName("Name")
			name, ok := d.str(kv.Value, "name")
			if !ok {
				return
			}
			if name, ok = d.checkString(kv.Value, f, "name", name); !ok {
				return
			}
			if prev, dup := d.seen.stores[name]; dup {
				d.errorf(kv.Value, "store %q is already defined at %s", name, prev)
				return
			}
			d.seen.stores[name] = d.pos(kv.Value)
			s.Name = name
		},
	}, other)
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
