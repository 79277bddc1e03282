package policy

import (
	"fmt"
	"reflect"
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
	// Doc is the key's one line of documentation; Unset says the key has
	// no value (an optional path or list nobody gave).
	Doc   string
	Unset bool
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
		if key := declKey(v.Type().Field(i)); key != "" {
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

// optionField finds the field of opts (a pointer to a struct) that holds key.
func optionField(opts any, key string) (reflect.Value, reflect.StructField, bool) {
	v := reflect.ValueOf(opts).Elem()
	for i := 0; i < v.NumField(); i++ {
		if f := v.Type().Field(i); declKey(f) == key {
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

// validateOptions runs the options' own cross-field checks, if any.
func validateOptions(opts any) error {
	if v, ok := opts.(interface{ Validate() error }); ok {
		return v.Validate()
	}
	return nil
}
