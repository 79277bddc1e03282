package control

import (
	"reflect"
	"testing"
)

func TestPassages(t *testing.T) {
	hit := func(cite string, line int64, around int64) Result {
		r := Result{Citation: cite + "#L" + string(rune('0'+line%10)), LineNumber: line}
		for n := line - around; n < line; n++ {
			if n > 0 {
				r.Before = append(r.Before, Turn{Line: n})
			}
		}
		for n := line + 1; n <= line+around; n++ {
			r.After = append(r.After, Turn{Line: n})
		}
		return r
	}
	for _, tc := range []struct {
		name string
		in   []Result
		want [][]int
	}{
		{"apart", []Result{hit("a", 10, 1), hit("a", 20, 1)}, [][]int{{0}, {1}}},
		{"overlapping, ranked by the best", []Result{hit("a", 41, 1), hit("b", 5, 0), hit("a", 40, 1), hit("a", 43, 1)}, [][]int{{2, 0, 3}, {1}}},
		{"touching", []Result{hit("a", 3, 1), hit("a", 5, 1)}, [][]int{{0, 1}}},
		{"bare hits stay apart", []Result{hit("a", 3, 0), hit("a", 4, 0)}, [][]int{{0}, {1}}},
		{"another file", []Result{hit("a", 3, 1), hit("b", 3, 1)}, [][]int{{0}, {1}}},
		{"through a third", []Result{hit("a", 10, 2), hit("a", 18, 2), hit("a", 14, 2)}, [][]int{{0, 2, 1}}},
	} {
		var got [][]int
		for _, p := range Passages(tc.in) {
			got = append(got, p.Members)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}
