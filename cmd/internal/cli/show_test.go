package cli

import "testing"

func TestWidenCitation(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
		bad  bool
	}{
		{in: "s.jsonl#L10", n: 2, want: "s.jsonl#L8-12"},
		{in: "/a/b/s.jsonl@3#L2-4", n: 5, want: "/a/b/s.jsonl@3#L1-9"},
		{in: "x.db#sess#L1", n: 1, want: "x.db#sess#L1-2"},
		{in: "s.jsonl#L9223372036854775807", n: 3, want: "s.jsonl#L9223372036854775804-9223372036854775807"},
		{in: "s.jsonl", n: 1, bad: true},
		{in: "s.jsonl#L5-2", n: 1, bad: true},
		{in: "s.jsonl#L0", n: 1, bad: true},
		{in: "s.jsonl#L99999999999999999999", n: 1, bad: true},
	}
	for _, tt := range tests {
		got, err := widenCitation(tt.in, tt.n)
		if tt.bad != (err != nil) || got != tt.want {
			t.Errorf("widenCitation(%q, %d) = %q, %v; want %q (error %t)", tt.in, tt.n, got, err, tt.want, tt.bad)
		}
	}
}
