package policy

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Expand renders the policy as YAML with every key spelled out: the top
// level and its sections, then each store with its preset expanded, every
// default written and each layout option; a key with no value (an unset
// path, an absent section) as a comment saying what it is for. What it
// prints loads back to the same policy (memwatch validate --expand).
// maxWatches, when not 0, is written for a store's automatic max_watches,
// as what it is on this machine; with 0 that key is a comment.
func Expand(p *Policy, maxWatches int) string {
	var b strings.Builder
	writeSection(&b, reflect.ValueOf(p).Elem(), "", func(key string) bool { return key == "stores" })
	if len(p.Stores) == 0 {
		b.WriteString("stores: []\n")
		return b.String()
	}
	b.WriteString("stores:\n")
	for _, s := range p.Stores {
		fmt.Fprintf(&b, "  - name: %s\n", s.Name)
		if s.Preset != "" {
			fmt.Fprintf(&b, "    # preset: %s (%s)\n", s.Preset, Presets[s.Preset].Agent)
		}
		fmt.Fprintf(&b, "    layout: %s\n", s.Layout)
		fmt.Fprintf(&b, "    paths: %s\n", valueText(reflect.ValueOf(s.Paths)))
		own, opts := StoreKeys(s)
		for _, o := range own {
			if o.Key == "max_watches" && o.Value == "0" { // automatic
				if maxWatches > 0 {
					o.Value = strconv.Itoa(maxWatches)
				} else {
					o.Unset = true
				}
			}
			writeOption(&b, "    ", o)
		}
		if len(opts) > 0 {
			fmt.Fprintf(&b, "    # %s options:\n", s.Layout)
		}
		for _, o := range opts {
			writeOption(&b, "    ", o)
		}
	}
	return b.String()
}

// writeOption writes one key: a key with no value as a comment saying
// what it is for, so every key is listed and the output still loads.
func writeOption(b *strings.Builder, indent string, o Option) {
	if o.Unset {
		fmt.Fprintf(b, "%s# %s: (not set) %s\n", indent, o.Key, o.Doc)
		return
	}
	fmt.Fprintf(b, "%s%s: %v\n", indent, o.Key, o.Value)
}

// writeSection writes the keys of the struct v at indent: values as
// valueText renders them, sections nested, a map of sections (llm) a
// section per name in order, a list of sections (control.tokens) as a
// YAML list. skip leaves keys out (the stores, written by Expand).
func writeSection(b *strings.Builder, v reflect.Value, indent string, skip func(string) bool) {
	for _, f := range declFields(v.Type()) {
		key, fv := declKey(f), v.FieldByIndex(f.Index)
		if skip != nil && skip(key) {
			continue
		}
		unset := Option{Key: key, Doc: f.Tag.Get("doc"), Unset: true}
		switch {
		case fv.Kind() == reflect.Struct:
			fmt.Fprintf(b, "%s%s:\n", indent, key)
			writeSection(b, fv, indent+"  ", nil)
		case fv.Kind() == reflect.Pointer && fv.Type().Elem().Kind() == reflect.Struct:
			if fv.IsNil() {
				writeOption(b, indent, unset)
				continue
			}
			fmt.Fprintf(b, "%s%s:\n", indent, key)
			writeSection(b, fv.Elem(), indent+"  ", nil)
		case fv.Kind() == reflect.Map && isSection(fv.Type().Elem()):
			if fv.Len() == 0 {
				writeOption(b, indent, unset)
				continue
			}
			fmt.Fprintf(b, "%s%s:\n", indent, key)
			names := make([]string, 0, fv.Len())
			for _, k := range fv.MapKeys() {
				names = append(names, k.String())
			}
			slices.Sort(names)
			for _, name := range names {
				fmt.Fprintf(b, "%s  %s:\n", indent, name)
				writeSection(b, reflect.Indirect(fv.MapIndex(reflect.ValueOf(name))), indent+"    ", nil)
			}
		case fv.Kind() == reflect.Slice && isSection(fv.Type().Elem()):
			if fv.Len() == 0 {
				writeOption(b, indent, unset)
				continue
			}
			fmt.Fprintf(b, "%s%s:\n", indent, key)
			for i := range fv.Len() {
				var item strings.Builder
				writeSection(&item, reflect.Indirect(fv.Index(i)), indent+"    ", nil)
				// The item's first key opens the list entry.
				b.WriteString(indent + "  - " + strings.TrimPrefix(item.String(), indent+"    "))
			}
		default:
			text := valueText(fv)
			if text == "" {
				writeOption(b, indent, unset)
				continue
			}
			writeOption(b, indent, Option{Key: key, Value: text})
		}
	}
}

// isSection reports whether t (or what it points to) is a struct of keys.
func isSection(t reflect.Type) bool {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct
}
