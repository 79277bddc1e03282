package main

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/memwatch/memwatch/layout/registry"
	"github.com/memwatch/memwatch/policy"
)

// TestExpandListsEveryKey: validate --expand spells out every key of the
// top level and its sections, every store key and every option of each
// layout, set or not, and what it prints loads back to the same policy.
func TestExpandListsEveryKey(t *testing.T) {
	dir := t.TempDir()
	var src strings.Builder
	src.WriteString(`version: 1
max_jobs: 3
control:
  tcp: 127.0.0.1:7777
  tokens:
    - name: ci
      sha256: 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
      stores: [s0]
      rights: [read, write]
llm:
  default:
    base_url: http://127.0.0.1:11434/v1
    model: qwen2.5:7b
    headers: {X-Team: agents, X-Two: "two words"}
  second: {base_url: "http://127.0.0.1:8080/v1", model: m}
replicate:
  url: s3://bucket/prefix
  endpoint: http://127.0.0.1:9000
stores:
`)
	specs := registry.Specs()
	for i, l := range specs {
		fmt.Fprintf(&src, "  - {name: s%d, layout: %s, paths: [%q]}\n", i, l.Name, dir)
	}
	p, err := policy.Parse("p.yaml", []byte(src.String()), specs)
	if err != nil {
		t.Fatal(err)
	}
	out := expandPolicy(p)
	keyRe := regexp.MustCompile(`^\s*(?:- )?(?:# )?([a-z_0-9]+):`)
	// Every key of the top level and its sections, set or in a comment.
	top, _, _ := strings.Cut(out, "\nstores:\n")
	named := map[string]bool{}
	for _, line := range strings.Split(top, "\n") {
		if m := keyRe.FindStringSubmatch(line); m != nil {
			named[m[1]] = true
		}
	}
	for _, sec := range []reflect.Type{reflect.TypeFor[policy.Policy](), reflect.TypeFor[policy.Control](), reflect.TypeFor[policy.Token](),
		reflect.TypeFor[policy.MCP](), reflect.TypeFor[policy.Metrics](), reflect.TypeFor[policy.UI](), reflect.TypeFor[policy.Endpoint](), reflect.TypeFor[policy.Replicate]()} {
		for _, k := range keysOf(sec) {
			if k != "stores" && !named[k] {
				t.Errorf("validate --expand does not list %s's %s:\n%s", sec.Name(), k, top)
			}
		}
	}
	for _, want := range []string{`headers: {"X-Team": "agents", "X-Two": "two words"}`, "  second:\n", "    - name: \"ci\"\n", "max_jobs: 3\n"} {
		if !strings.Contains(top, want) {
			t.Errorf("validate --expand: no %q in\n%s", want, top)
		}
	}
	// The keys each store's block names, set or in a comment.
	blocks := strings.Split(out, "\n  - name: ")[1:]
	if len(blocks) != len(specs) {
		t.Fatalf("got %d stores in the expansion, want %d:\n%s", len(blocks), len(specs), out)
	}
	storeKeys := keysOf(reflect.TypeFor[policy.Store]())
	for i, l := range specs {
		named := map[string]bool{"name": true}
		for _, line := range strings.Split(blocks[i], "\n") {
			if m := keyRe.FindStringSubmatch(line); m != nil {
				named[m[1]] = true
			}
		}
		want := append(keysOf(reflect.TypeOf(l.NewOptions()).Elem()), storeKeys...)
		for _, k := range want {
			if k != "preset" && !named[k] {
				t.Errorf("layout %s: validate --expand does not list %s:\n%s", l.Name, k, blocks[i])
			}
		}
	}
	again, err := policy.Parse("expanded.yaml", []byte(out), specs)
	if err != nil {
		t.Fatalf("the expansion does not validate: %v\n%s", err, out)
	}
	if got := expandPolicy(again); got != out {
		t.Errorf("expanding the expansion: got\n%s\nwant\n%s", got, out)
	}
}

// keysOf lists the YAML keys of a declared struct.
func keysOf(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		if k, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); k != "" && k != "-" && f.IsExported() {
			out = append(out, k)
		}
	}
	return out
}
