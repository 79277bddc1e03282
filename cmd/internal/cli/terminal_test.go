package cli

import (
	"bytes"
	"testing"
)

func TestInertMakesControlsVisible(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain text\n\tindented\n", "plain text\n\tindented\n"},
		{"\x1b[2J\x1b]0;owned\x07", `\x1b[2J\x1b]0;owned\x07`},
		{"bell\x07 del\x7f", `bell\x07 del\x7f`},
		{"c1 \u009b31m", `c1 \u009b31m`},
		{"bad \xff utf8", `bad \xff utf8`},
		{"ünïcode ✓", "ünïcode ✓"},
	}
	for _, tt := range tests {
		var b bytes.Buffer
		n, err := inert{&b}.Write([]byte(tt.in))
		if err != nil || n != len(tt.in) {
			t.Errorf("Write(%q) = %d, %v", tt.in, n, err)
		}
		if got := b.String(); got != tt.want {
			t.Errorf("Write(%q) wrote %q, want %q", tt.in, got, tt.want)
		}
	}
}
