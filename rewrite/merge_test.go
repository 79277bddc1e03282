package rewrite

import (
	"strings"
	"testing"
)

func TestAddedAndInsert(t *testing.T) {
	tests := []struct {
		name             string
		base, next, live string
		want             string
	}{
		{
			name: "an appended entry goes after the lines it followed",
			base: "# h\na\nb\n", next: "# h\na\nb\n## e1\n- x\n", live: "# h\nb\nc\n",
			want: "# h\nb\n## e1\n- x\nc\n",
		},
		{
			name: "an entry already there is not added again",
			base: "a\n", next: "a\nnew\n", live: "z\nnew\n",
			want: "z\nnew\n",
		},
		{
			name: "a block whose anchor is gone goes at the end",
			base: "a\nb\n", next: "a\nb\nnew\n", live: "x\ny",
			want: "x\ny\nnew\n",
		},
		{
			name: "a block at the start goes at the start",
			base: "a\n", next: "first\na\n", live: "b\n",
			want: "first\nb\n",
		},
		{
			name: "deletions are not replayed",
			base: "a\nb\nc\n", next: "a\nc\nd\n", live: "a\nb\nc\n",
			want: "a\nb\nc\nd\n",
		},
		{
			name: "a JSONL record keeps its line",
			base: `{"a":1}` + "\n", next: `{"a":1}` + "\n" + `{"b":2}` + "\n", live: `{"c":3}` + "\n",
			want: `{"c":3}` + "\n" + `{"b":2}` + "\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(Insert([]byte(tt.live), Added([]byte(tt.base), []byte(tt.next))))
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestAddedOnLargeInputsUsesTheSet(t *testing.T) {
	base := strings.Repeat("line\n", 10000)
	next := base + "new one\n"
	got := Added([]byte(base), []byte(next))
	if len(got) != 1 || got[0].Lines[0] != "new one\n" {
		t.Errorf("Added = %+v, want the one new line", got)
	}
}

func TestFromResult(t *testing.T) {
	r := risk{Dropped: []string{"dropped entry"}, Novel: []string{"summary line"}}
	for _, tt := range []struct {
		live string
		want bool
	}{
		{"kept\nsummary line\n", true},
		{"kept\n", true},
		{"kept\ndropped entry\n", false},
		{"kept\ndropped entry\nsummary line\n", true},
	} {
		if got := r.fromResult([]byte(tt.live)); got != tt.want {
			t.Errorf("fromResult(%q) = %v, want %v", tt.live, got, tt.want)
		}
	}
}

func FuzzInsertKeepsEveryLine(f *testing.F) {
	f.Add("a\nb\n", "a\nb\nc\n", "x\n")
	f.Add("", "new", "")
	f.Add("# h\n", "# h\n## e\n- x\n", "# h\n\n")
	f.Fuzz(func(t *testing.T, base, next, live string) {
		bs := Added([]byte(base), []byte(next))
		out := splitLines(Insert([]byte(live), bs))
		trim := func(l []string) []string {
			o := make([]string, len(l))
			for i, s := range l {
				o[i] = strings.TrimSuffix(s, "\n")
			}
			return o
		}
		// The live file's lines stay, in order; every added line is there.
		if !subsequence(trim(splitLines([]byte(live))), trim(out)) {
			t.Fatalf("Insert lost or reordered live lines: %q from %q", out, live)
		}
		for _, b := range bs {
			for _, l := range trim(b.Lines) {
				if !subsequence([]string{l}, trim(out)) {
					t.Fatalf("added line %q missing from %q", l, out)
				}
			}
		}
	})
}

// subsequence reports whether a's elements appear in b in order.
func subsequence(a, b []string) bool {
	i := 0
	for _, x := range b {
		if i < len(a) && a[i] == x {
			i++
		}
	}
	return i == len(a)
}
