package policy

import "testing"

func TestHumanApart(t *testing.T) {
	tests := []struct {
		a, b         int64
		wantA, wantB string
	}{
		{15 << 10, 25 << 10, "15 KiB", "25 KiB"},
		{8241, 8192, "8241 B", "8192 B"}, // "8.0 KiB, over 8.0 KiB" reads wrong
		{1050, 1024, "1050 B", "1024 B"},
		{3 << 20, 1 << 20, "3.0 MiB", "1.0 MiB"},
		{812, 400, "812 B", "400 B"},
	}
	for _, tt := range tests {
		a, b := HumanApart(tt.a, tt.b)
		if a != tt.wantA || b != tt.wantB {
			t.Errorf("HumanApart(%d, %d) = %q, %q; want %q, %q", tt.a, tt.b, a, b, tt.wantA, tt.wantB)
		}
	}
}
