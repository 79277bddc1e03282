package policy

import (
	"fmt"
	"github.com/memwatch/memwatch/confine"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
)

// LayoutSpec is what the decoder needs to know of a layout: its name and
// its options. The layouts themselves live in layout/ (which imports this
// package), so the caller hands their specs to Load and Parse;
// layout/registry has the list.
type LayoutSpec struct {
	Name string
	// NewOptions returns the layout's options set to their defaults: a
	// pointer to a struct whose fields tagged `yaml:"key"` are the store
	// keys the layout accepts. A field's type says how its value is written:
	// Size ("100KiB"), time.Duration ("30m"), int (not negative), string or
	// bool. Two more tags check a string: `enum:"a|b"` lists its values, and
	// `path:"local"` (a path inside each root, relative, no ..),
	// `path:"glob"` (the same, and a valid glob) or `path:"anyglob"` (a
	// valid glob anywhere) say it names files.
	// When the struct has a method Validate() error it is called once every
	// key is decoded, for checks across fields.
	NewOptions func() any
}

// OptionsWarner is implemented by layout options that can be valid and
// still probably wrong for the store they are in (memwatch validate prints
// the warnings).
type OptionsWarner interface {
	Warnings(s *Store) []string
}

// OptionsOf returns a store's options as the layout's type T. A store built
// by hand with no options gets def's defaults; options of another layout's
// type are a programming error and panic.
func OptionsOf[T any](s *Store, def func() *T) *T {
	if s == nil || s.Options == nil {
		return def()
	}
	o, ok := s.Options.(*T)
	if !ok {
		panic(fmt.Sprintf("store %q (layout %s) has options %T, not %T", s.Name, s.Layout, s.Options, o))
	}
	return o
}

// Option is one layout option of a store, for display.
type Option struct {
	Key   string
	Value any
}

// OptionList lists a layout options struct's keys and values in the order
// the layout declares them.
func OptionList(opts any) []Option {
	v := reflect.ValueOf(opts)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	v = v.Elem()
	var out []Option
	for i := 0; i < v.NumField(); i++ {
		if key := optionKey(v.Type().Field(i)); key != "" {
			out = append(out, Option{Key: key, Value: v.Field(i).Interface()})
		}
	}
	return out
}

// optionKeys lists the keys a layout's options accept.
func optionKeys(spec LayoutSpec) []string {
	var out []string
	for _, o := range OptionList(spec.NewOptions()) {
		out = append(out, o.Key)
	}
	return out
}

func optionKey(f reflect.StructField) string {
	k, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if k == "-" || !f.IsExported() {
		return ""
	}
	return k
}

// optionField finds the field of opts (a pointer to a struct) that holds key.
func optionField(opts any, key string) (reflect.Value, reflect.StructField, bool) {
	v := reflect.ValueOf(opts).Elem()
	for i := 0; i < v.NumField(); i++ {
		if f := v.Type().Field(i); optionKey(f) == key {
			return v.Field(i), f, true
		}
	}
	return reflect.Value{}, reflect.StructField{}, false
}

// setOption sets a key to a value of the field's own type (a preset's).
// A preset naming a key or type the layout does not have is a programming
// error, caught by the presets' tests.
func setOption(opts any, key string, val any) {
	fv, _, ok := optionField(opts, key)
	if !ok {
		panic(fmt.Sprintf("options %T have no key %q", opts, key))
	}
	fv.Set(reflect.ValueOf(val).Convert(fv.Type()))
}

var (
	sizeType     = reflect.TypeFor[Size]()
	durationType = reflect.TypeFor[time.Duration]()
)

// option decodes the YAML value of key into its field of opts.
func (d *decoder) option(n ast.Node, opts any, key string) {
	fv, f, ok := optionField(opts, key)
	if !ok {
		return
	}
	switch {
	case f.Type == sizeType:
		if v, ok := d.size(n, key); ok {
			fv.SetInt(int64(v))
		}
	case f.Type == durationType:
		if v, ok := d.duration(n, key); ok {
			fv.SetInt(int64(v))
		}
	case f.Type.Kind() == reflect.Int:
		if v, ok := d.intVal(n, key); ok {
			if v < 0 {
				d.errorf(n, "%s must not be negative", key)
				return
			}
			fv.SetInt(int64(v))
		}
	case f.Type.Kind() == reflect.Bool:
		if v, ok := d.boolVal(n, key); ok {
			fv.SetBool(v)
		}
	case f.Type.Kind() == reflect.String:
		v, ok := d.str(n, key)
		if !ok {
			return
		}
		if msg := checkOptionString(f, v); msg != "" {
			d.errorf(n, "%s", msg)
			return
		}
		fv.SetString(v)
	default:
		panic(fmt.Sprintf("option %s: unsupported type %s", key, f.Type))
	}
}

// checkOptionString applies a string field's enum and path tags.
func checkOptionString(f reflect.StructField, v string) string {
	key := optionKey(f)
	if e := f.Tag.Get("enum"); e != "" {
		values := strings.Split(e, "|")
		if !slices.Contains(values, v) {
			return fmt.Sprintf("%s must be one of %s, not %q%s", key, strings.Join(values, ", "), v, suggest(v, values))
		}
	}
	switch f.Tag.Get("path") {
	case "glob":
		if err := confine.CheckGlob(v); err != nil {
			return fmt.Sprintf("%s: %v", key, err)
		}
		fallthrough
	case "local":
		// Every alternative of a glob ({a,b}) stays in the root.
		if v != "" && slices.ContainsFunc(confine.Alternatives(v), func(a string) bool { return !filepath.IsLocal(a) }) {
			return fmt.Sprintf("%s %q must stay inside each root (relative, no ..): memwatch never reads or writes outside a root; make the root a directory that holds both", key, v)
		}
	case "anyglob":
		if err := confine.CheckGlob(v); err != nil {
			return fmt.Sprintf("%s: %v", key, err)
		}
	}
	return ""
}

// validateOptions runs the options' own cross-field checks, if any.
func validateOptions(opts any) error {
	if v, ok := opts.(interface{ Validate() error }); ok {
		return v.Validate()
	}
	return nil
}
