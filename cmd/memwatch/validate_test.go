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

// TestExpandListsEveryKey: validate --expand spells out every store key
// and every option of each layout, set or not, and what it prints is a
// policy that validates to the same stores.
func TestExpandListsEveryKey(t *testing.T) {
	dir := t.TempDir()
	var src strings.Builder
	src.WriteString("version: 1\nstores:\n")
	specs := registry.Specs()
	for i, l := range specs {
		fmt.Fprintf(&src, "  - {name: s%d, layout: %s, paths: [%q]}\n", i, l.Name, dir)
	}
	p, err := policy.Parse("p.yaml", []byte(src.String()), specs)
	if err != nil {
		t.Fatal(err)
	}
	out := expandPolicy(p)
	// The keys each store's block names, set or in a comment.
	keyRe := regexp.MustCompile(`^\s+(?:- )?(?:# )?([a-z_]+):`)
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
