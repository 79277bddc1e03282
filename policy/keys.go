package policy

import (
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"

	"github.com/memwatch/memwatch/confine"
)

// A key is declared by a struct field's tags (see Policy): the decoder
// below reads every section, store and layout's options through them, and
// Default, Reference and memwatch validate --expand follow from them too.

var (
	sizeType     = reflect.TypeFor[Size]()
	durationType = reflect.TypeFor[time.Duration]()
)

// declKey is a field's key name ("" for a field that is no key).
func declKey(f reflect.StructField) string {
	k, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if k == "-" || !f.IsExported() {
		return ""
	}
	return k
}

// declFields lists the key fields of a struct type, in order; those of
// a struct embedded inline (yaml:",inline", as S3) are its own, their
// Index the path to them.
func declFields(t reflect.Type) []reflect.StructField {
	var out []reflect.StructField
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct && f.Tag.Get("yaml") == ",inline" {
			for _, sub := range declFields(f.Type) {
				sub.Index = append([]int{i}, sub.Index...)
				out = append(out, sub)
			}
			continue
		}
		if declKey(f) != "" {
			out = append(out, f)
		}
	}
	return out
}

// setDefaults sets every key field of the struct v to its declared default
// (and the sections in it, recursively).
func setDefaults(v reflect.Value) {
	for _, f := range declFields(v.Type()) {
		fv := v.FieldByIndex(f.Index)
		if def, ok := f.Tag.Lookup("default"); ok {
			x, err := parseText(f, def)
			if err != nil {
				panic(fmt.Sprintf("default of %s: %v", declKey(f), err))
			}
			fv.Set(x)
			continue
		}
		if f.Type.Kind() == reflect.Struct && f.Type != sizeType {
			setDefaults(fv)
		}
	}
}

// parseText parses a value written as in a policy (a tag's default or
// bound) into the field's type.
func parseText(f reflect.StructField, s string) (reflect.Value, error) {
	v := reflect.New(f.Type).Elem()
	switch {
	case f.Type == sizeType:
		n, err := ParseSize(s)
		v.SetInt(int64(n))
		return v, err
	case f.Type == durationType:
		d, err := ParseDuration(s)
		v.SetInt(int64(d))
		return v, err
	}
	switch f.Type.Kind() {
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(s, 10, 64)
		v.SetInt(n)
		return v, err
	case reflect.Float64:
		x, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
		if strings.HasSuffix(s, "%") {
			x /= 100
		}
		v.SetFloat(x)
		return v, err
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		v.SetBool(b)
		return v, err
	case reflect.String:
		v.SetString(s)
		return v, nil
	}
	return v, fmt.Errorf("no text form for %s", f.Type)
}

// section decodes the mapping n into the key fields of targets (a store's
// own struct and its layout's options, or one section): unknown keys are
// reported with a suggestion (other explains keys that belong elsewhere),
// handled keys are left to the caller's functions, required keys that are
// missing are reported at at. It returns the pairs by key.
func (d *decoder) section(n, at ast.Node, where, prefix string, targets []reflect.Value, handled map[string]func(*ast.MappingValueNode), other map[string]string) map[string]*ast.MappingValueNode {
	kvs, ok := d.mapping(n, where)
	if !ok {
		return nil
	}
	type slot struct {
		v reflect.Value
		f reflect.StructField
	}
	slots := map[string]slot{}
	var allowed []string
	for _, t := range targets {
		for _, f := range declFields(t.Type()) {
			slots[declKey(f)] = slot{t.FieldByIndex(f.Index), f}
			allowed = append(allowed, declKey(f))
		}
	}
	for k := range handled {
		if !slices.Contains(allowed, k) {
			allowed = append(allowed, k)
		}
	}
	d.checkKeys(kvs, where, allowed, other)
	byKey := map[string]*ast.MappingValueNode{}
	for _, kv := range kvs {
		k := keyOf(kv)
		if _, dup := byKey[k]; dup {
			continue
		}
		byKey[k] = kv
		if h, ok := handled[k]; ok {
			h(kv)
			continue
		}
		if s, ok := slots[k]; ok {
			d.value(kv.Value, kv.Key, s.v, s.f, prefix+k)
		}
	}
	for _, t := range targets {
		for _, f := range declFields(t.Type()) {
			k := declKey(f)
			if msg, req := f.Tag.Lookup("required"); req && byKey[k] == nil && handled[k] == nil {
				in := ""
				if where != "top level" {
					in = " in " + where
				}
				d.errorf(at, "missing required key %s%s%s", k, in, msg)
			}
		}
	}
	return byKey
}

// value decodes n into fv, the field f's value, named name in messages;
// key is where a section's missing keys are reported.
func (d *decoder) value(n, key ast.Node, fv reflect.Value, f reflect.StructField, name string) {
	t := f.Type
	var x reflect.Value
	ok := true
	switch {
	case t == sizeType:
		x, ok = valueOf(d.size(n, name))
	case t == durationType:
		x, ok = valueOf(d.duration(n, name))
	case t.Kind() == reflect.Int:
		x, ok = valueOf(d.intVal(n, name))
	case t.Kind() == reflect.Int64:
		x, ok = valueOf(d.int64Val(n, name))
	case t.Kind() == reflect.Float64 && f.Tag.Get("kind") == "fraction":
		x, ok = valueOf(d.fraction(n, name))
	case t.Kind() == reflect.Float64:
		x, ok = valueOf(d.floatVal(n, name))
	case t.Kind() == reflect.Bool:
		x, ok = valueOf(d.boolVal(n, name))
	case t.Kind() == reflect.String:
		var s string
		if s, ok = d.str(n, name); ok {
			x, ok = valueOf(d.checkString(n, f, name, s))
		}
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		var list []string
		if f.Tag.Get("path") == "globs" {
			list = d.globs(n, name)
		} else {
			list = d.strList(n, name)
			for _, s := range list {
				if _, ok := d.checkString(n, f, name, s); !ok {
					return
				}
			}
		}
		x = reflect.ValueOf(list)
	case t.Kind() == reflect.Map && t.Elem().Kind() == reflect.String:
		kvs, ok := d.mapping(n, name)
		if !ok {
			return
		}
		m := map[string]string{}
		for _, kv := range kvs {
			if s, ok := d.str(kv.Value, name+"."+keyOf(kv)); ok {
				m[keyOf(kv)] = s
			}
		}
		x = reflect.ValueOf(m)
	case t.Kind() == reflect.Struct:
		d.sectionValue(n, key, fv, name)
		return
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct:
		if fv.IsNil() {
			fv.Set(reflect.New(t.Elem()))
			setDefaults(fv.Elem())
		}
		d.sectionValue(n, key, fv.Elem(), name)
		return
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		d.list(n, fv, name)
		return
	case t.Kind() == reflect.Map && t.Elem().Kind() == reflect.Pointer:
		d.named(n, fv, name)
		return
	default:
		panic(fmt.Sprintf("key %s: no decoder for %s", name, t))
	}
	if !ok || !d.inBounds(n, f, name, x) {
		return
	}
	fv.Set(x.Convert(t))
}

// valueOf is a parser's result as a reflect.Value.
func valueOf[T any](v T, ok bool) (reflect.Value, bool) { return reflect.ValueOf(v), ok }

// sectionValue decodes a section (control, mcp, replicate, an endpoint,
// a token) and runs its own checks across keys; what is missing is
// reported at key, the section's name.
func (d *decoder) sectionValue(n, key ast.Node, v reflect.Value, name string) {
	if pos := v.FieldByName("Pos"); pos.IsValid() && pos.Type() == reflect.TypeFor[Pos]() {
		pos.Set(reflect.ValueOf(d.pos(key)))
	}
	byKey := d.section(n, key, name, name+".", []reflect.Value{v}, nil, nil)
	if c, ok := v.Addr().Interface().(interface {
		decoded(d *decoder, n ast.Node, byKey map[string]*ast.MappingValueNode)
	}); ok && byKey != nil {
		c.decoded(d, key, byKey)
	}
}

// list decodes a list of sections (control.tokens).
func (d *decoder) list(n ast.Node, fv reflect.Value, name string) {
	seq, ok := unwrap(n).(*ast.SequenceNode)
	if !ok {
		d.errorf(n, "%s must be a list (each item starts with `- name: ...`)", name)
		return
	}
	for _, item := range seq.Values {
		e := reflect.New(fv.Type().Elem()).Elem()
		setDefaults(e)
		before := len(d.errs)
		d.sectionValue(item, item, e, name)
		if len(d.errs) == before {
			fv.Set(reflect.Append(fv, e))
		}
	}
}

// named decodes a mapping of named sections (llm endpoints); a name given
// in two files is an error.
func (d *decoder) named(n ast.Node, fv reflect.Value, name string) {
	kvs, ok := d.mapping(n, name)
	if !ok {
		return
	}
	if fv.IsNil() {
		fv.Set(reflect.MakeMap(fv.Type()))
	}
	for _, kv := range kvs {
		k := keyOf(kv)
		id := name + "." + k
		if prev, dup := d.seen.named[id]; dup {
			d.errorf(kv.Key, "%s endpoint %q is already defined at %s", name, k, prev)
			continue
		}
		d.seen.named[id] = d.pos(kv.Key)
		e := reflect.New(fv.Type().Elem().Elem())
		setDefaults(e.Elem())
		if f := e.Elem().FieldByName("Name"); f.IsValid() {
			f.SetString(k)
		}
		d.sectionValue(kv.Value, kv.Key, e.Elem(), id)
		fv.SetMapIndex(reflect.ValueOf(k), e)
	}
}

// inBounds checks a number against the field's min, max and zero tags.
func (d *decoder) inBounds(n ast.Node, f reflect.StructField, name string, x reflect.Value) bool {
	minT, hasMin := f.Tag.Lookup("min")
	maxT, hasMax := f.Tag.Lookup("max")
	num := func(v reflect.Value) float64 {
		if v.CanFloat() {
			return v.Float()
		}
		if v.CanInt() {
			return float64(v.Int())
		}
		return math.NaN()
	}
	val := num(x)
	if math.IsNaN(val) {
		return true
	}
	if !hasMin && !hasMax {
		if x.CanInt() && val < 0 {
			d.errorf(n, "%s must not be negative", name)
			return false
		}
		return true
	}
	if zero := f.Tag.Get("zero"); zero != "" && val == 0 {
		return true
	}
	bound := func(t string) float64 {
		b, err := parseText(f, t)
		if err != nil {
			panic(fmt.Sprintf("bound %q of %s: %v", t, name, err))
		}
		return num(b)
	}
	ok := true
	switch {
	case minT == ">0":
		ok = val > 0
	case hasMin:
		ok = val >= bound(minT)
	}
	if hasMax && val > bound(maxT) {
		ok = false
	}
	if ok {
		return true
	}
	var msg string
	switch {
	case minT == ">0" && hasMax:
		msg = fmt.Sprintf("%s must be above 0 and at most %s", name, maxT)
	case minT == ">0":
		msg = fmt.Sprintf("%s must be positive", name)
	case hasMin && hasMax:
		msg = fmt.Sprintf("%s must be between %s and %s", name, minT, maxT)
	case hasMax:
		msg = fmt.Sprintf("%s must be at most %s", name, maxT)
	case f.Tag.Get("zero") != "":
		msg = fmt.Sprintf("%s must be 0 (%s) or at least %s", name, f.Tag.Get("zero"), minT)
	default:
		msg = fmt.Sprintf("%s must be at least %s", name, minT)
	}
	if h := f.Tag.Get("hint"); h != "" {
		msg += " (" + h + ")"
	}
	d.errorf(n, "%s", msg)
	return false
}

// checkString applies a string's path, enum and check tags, and returns
// it as kept (~ expanded, normalized).
func (d *decoder) checkString(n ast.Node, f reflect.StructField, name, s string) (string, bool) {
	key := declKey(f)
	if e := f.Tag.Get("enum"); e != "" {
		values := strings.Split(e, "|")
		if !slices.Contains(values, s) {
			d.errorf(n, "%s must be one of %s, not %q%s", name, strings.Join(values, ", "), s, suggest(s, values))
			return "", false
		}
	}
	switch f.Tag.Get("path") {
	case "home":
		s = expandHome(s)
	case "glob":
		if err := confine.CheckGlob(s); err != nil {
			d.errorf(n, "%s: %v", key, err)
			return "", false
		}
		fallthrough
	case "local":
		// Every alternative of a glob ({a,b}) stays in the root.
		if s != "" && slices.ContainsFunc(confine.Alternatives(s), func(a string) bool { return !filepath.IsLocal(a) }) {
			d.errorf(n, "%s %q must stay inside each root (relative, no ..): memwatch never reads or writes outside a root; make the root a directory that holds both", key, s)
			return "", false
		}
	case "anyglob":
		if err := confine.CheckGlob(s); err != nil {
			d.errorf(n, "%s: %v", key, err)
			return "", false
		}
	}
	if c := f.Tag.Get("check"); c != "" {
		check, ok := stringChecks[c]
		if !ok {
			panic(fmt.Sprintf("key %s: no check %q", name, c))
		}
		v, msg := check(name, s)
		if msg != "" {
			d.errorf(n, "%s", msg)
			return "", false
		}
		s = v
	}
	return s, true
}

// stringChecks are the named checks of check:"..." tags: the value as
// kept, or why it is refused.
var stringChecks = map[string]func(name, s string) (string, string){
	"loopback": func(name, s string) (string, string) {
		host, _, err := net.SplitHostPort(s)
		ip := net.ParseIP(host)
		if err != nil || (host != "localhost" && (ip == nil || !ip.IsLoopback())) {
			return "", fmt.Sprintf("%s must be a loopback address such as 127.0.0.1:7070, not %q", name, s)
		}
		return s, ""
	},
	"hostport": func(name, s string) (string, string) {
		if _, port, err := net.SplitHostPort(s); err != nil || port == "" {
			return "", fmt.Sprintf("%s must be host:port, such as 127.0.0.1:9464, not %q", name, s)
		}
		return s, ""
	},
	"llmurl": func(name, s string) (string, string) {
		if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "", fmt.Sprintf("%s must be an http(s) URL such as http://127.0.0.1:11434/v1", name)
		}
		return s, ""
	},
	"s3url": func(name, s string) (string, string) {
		if u, err := url.Parse(s); err != nil || u.Scheme != "s3" || u.Host == "" || u.User != nil || u.RawQuery != "" {
			return "", fmt.Sprintf("%s must be s3://BUCKET/PREFIX (the bucket, then where in it the state goes)", name)
		}
		return s, ""
	},
	"s3endpoint": func(name, s string) (string, string) {
		if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return "", fmt.Sprintf("%s must be an http(s) URL such as http://127.0.0.1:9000 (no credentials in it: use access_key_env)", name)
		}
		return strings.TrimRight(s, "/"), ""
	},
	"secretfile": func(name, s string) (string, string) {
		if fi, err := os.Stat(s); err != nil {
			return "", fmt.Sprintf("%s: cannot read %s: %v", name, s, unwrapPathError(err))
		} else if fi.Mode().Perm()&0o077 != 0 {
			return "", fmt.Sprintf("%s: %s is readable by group or others (mode %04o); run chmod 600 %s", name, s, fi.Mode().Perm(), s)
		}
		return s, ""
	},
	"sha256": func(name, s string) (string, string) {
		s = strings.ToLower(strings.TrimSpace(s))
		if len(s) != 64 || strings.Trim(s, "0123456789abcdef") != "" {
			return "", "sha256 must be the 64 hex digits of the token's SHA-256 (memwatch token new prints one), not the token itself"
		}
		return s, ""
	},
	"storename": func(name, s string) (string, string) {
		if !storeNameRE.MatchString(s) {
			return "", fmt.Sprintf("store name %q must be lowercase letters, digits, '.', '_' or '-' (it is used in API paths)", s)
		}
		return s, ""
	},
}

func unwrapPathError(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// decoded checks a token's keys together.
func (t *Token) decoded(d *decoder, n ast.Node, byKey map[string]*ast.MappingValueNode) {
	if len(t.Stores) == 0 && len(t.Owners) == 0 && len(t.Hosts) == 0 && t.Name != "" && byKey["sha256"] != nil {
		d.errorf(n, "token %q reaches nothing: give it stores: [NAME, ...], owners: [USER, ...] or, on a central node, hosts: [HOST, ...]", t.Name)
	}
}

// decoded checks the tokens' names are unique.
func (c *Control) decoded(d *decoder, n ast.Node, byKey map[string]*ast.MappingValueNode) {
	seen := map[string]bool{}
	for _, t := range c.Tokens {
		if seen[t.Name] {
			d.errs = append(d.errs, &Error{Pos: t.Pos, Msg: fmt.Sprintf("token %q is defined twice", t.Name)})
		}
		seen[t.Name] = true
	}
}

// decoded refuses a key given both ways.
func (e *Endpoint) decoded(d *decoder, n ast.Node, byKey map[string]*ast.MappingValueNode) {
	if byKey["api_key_env"] != nil && byKey["api_key_file"] != nil {
		d.errorf(n, "llm.%s sets both api_key_env and api_key_file; keep one", e.Name)
	}
}

// decoded splits the URL and checks the credentials come in pairs.
func (r *Replicate) decoded(d *decoder, n ast.Node, byKey map[string]*ast.MappingValueNode) {
	r.Bucket, r.Prefix = bucketSection(d, n, byKey, "replicate", r.URL)
}

// decoded splits the URL and checks the credentials come in pairs.
func (f *Fleet) decoded(d *decoder, n ast.Node, byKey map[string]*ast.MappingValueNode) {
	f.Bucket, f.Prefix = bucketSection(d, n, byKey, "fleet", f.URL)
}

// bucketSection checks a section naming a bucket (replicate, fleet): its
// credentials come in pairs, each one way; it returns the URL's bucket and
// prefix.
func bucketSection(d *decoder, n ast.Node, byKey map[string]*ast.MappingValueNode, section, s3url string) (bucket, prefix string) {
	if u, err := url.Parse(s3url); err == nil && s3url != "" {
		bucket, prefix = u.Host, strings.Trim(u.Path, "/")
	}
	for _, pair := range [][2]string{{"access_key_env", "access_key_file"}, {"secret_key_env", "secret_key_file"}} {
		if byKey[pair[0]] != nil && byKey[pair[1]] != nil {
			d.errorf(byKey[pair[1]].Key, "%s sets both %s and %s; keep one", section, pair[0], pair[1])
		}
	}
	access := byKey["access_key_env"] != nil || byKey["access_key_file"] != nil
	secret := byKey["secret_key_env"] != nil || byKey["secret_key_file"] != nil
	if access != secret {
		d.errorf(n, "%s names an access key without a secret, or a secret without an access key: give both (access_key_env and secret_key_env, or the _file keys), or neither for the AWS SDK's default chain", section)
	}
	return bucket, prefix
}

// valueText renders a value as a policy writes it.
func valueText(v reflect.Value) string {
	switch {
	case v.Type() == sizeType:
		return Size(v.Int()).String()
	case v.Type() == durationType:
		if v.Int() == 0 {
			return "0"
		}
		return FormatDuration(time.Duration(v.Int()))
	}
	switch v.Kind() {
	case reflect.String:
		if v.String() == "" {
			return ""
		}
		return strconv.Quote(v.String())
	case reflect.Int, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.String && v.Len() > 0 {
			var items []string
			for i := range v.Len() {
				items = append(items, strconv.Quote(v.Index(i).String()))
			}
			return "[" + strings.Join(items, ", ") + "]"
		}
	case reflect.Map:
		if v.Type().Key().Kind() == reflect.String && v.Type().Elem().Kind() == reflect.String && v.Len() > 0 {
			var items []string
			for _, k := range v.MapKeys() {
				items = append(items, strconv.Quote(k.String())+": "+strconv.Quote(v.MapIndex(k).String()))
			}
			slices.Sort(items)
			return "{" + strings.Join(items, ", ") + "}"
		}
	}
	return ""
}

// StoreKeys lists every key of a store with its value as a policy writes
// it: the store's own keys (in declared order), then its layout's: what
// memwatch validate --expand prints. Keys with no value (an empty string
// or list) come as Unset with their documentation; preset (the expansion
// replaces it) and name, layout and paths, which the caller prints first,
// are left out.
func StoreKeys(s *Store) (own, options []Option) {
	list := func(v reflect.Value) []Option {
		var out []Option
		for _, f := range declFields(v.Type()) {
			k := declKey(f)
			if k == "preset" || k == "layout" || k == "paths" || k == "name" {
				continue
			}
			text := valueText(v.FieldByIndex(f.Index))
			out = append(out, Option{Key: k, Value: text, Doc: f.Tag.Get("doc"), Unset: text == ""})
		}
		return out
	}
	own = list(reflect.ValueOf(s).Elem())
	if s.Options != nil {
		options = list(reflect.ValueOf(s.Options).Elem())
	}
	return own, options
}

// KeySummary lists the keys of every section and layout, a line each, for
// memwatch validate --help.
func KeySummary(layouts []LayoutSpec) string {
	var b strings.Builder
	line := func(title string, t reflect.Type) {
		var keys []string
		for _, f := range declFields(t) {
			keys = append(keys, declKey(f))
		}
		fmt.Fprintf(&b, "  %-16s %s\n", title+":", strings.Join(keys, ", "))
	}
	line("top level", reflect.TypeFor[Policy]())
	line("control", reflect.TypeFor[Control]())
	line("control.tokens", reflect.TypeFor[Token]())
	line("metrics", reflect.TypeFor[Metrics]())
	line("ui", reflect.TypeFor[UI]())
	line("mcp", reflect.TypeFor[MCP]())
	line("llm.NAME", reflect.TypeFor[Endpoint]())
	line("replicate", reflect.TypeFor[Replicate]())
	line("fleet", reflect.TypeFor[Fleet]())
	line("stores", reflect.TypeFor[Store]())
	for _, l := range layouts {
		line(l.Name, reflect.TypeOf(l.NewOptions()).Elem())
	}
	return b.String()
}
