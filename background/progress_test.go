package background

import (
	"testing"
	"time"
)

// TestProgressUnderWayFirst: a status lists the roots being read before
// those not started (a person asks what is being read now, not which
// root is biggest), and counts the waiting ones and their bytes.
func TestProgressUnderWayFirst(t *testing.T) {
	var p Progress
	t0 := time.Now()
	p.Start(t0)
	p.Count("s", "/big", 40, 10<<20)
	p.Count("s", "/bigger", 50, 20<<20)
	p.Count("s", "/small", 4, 1<<20)
	p.Counted()
	p.Read("s", "/small", 100<<10)
	st := p.Status(t0.Add(time.Second), 0, 3, nil)
	if st == nil {
		t.Fatal("no status while catching up")
	}
	var got []string
	for _, r := range st.Roots {
		got = append(got, r.Root)
	}
	if want := []string{"/small", "/bigger", "/big"}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("roots %v, want %v (under way first, then most left)", got, want)
	}
	if st.Waiting != 2 || st.WaitingBytes != 30<<20 {
		t.Errorf("waiting %d roots of %d bytes, want 2 of %d", st.Waiting, st.WaitingBytes, 30<<20)
	}
	if st.Left <= 0 || st.Files != 1 || st.FilesTotal != 94 {
		t.Errorf("files %d of %d, left %v", st.Files, st.FilesTotal, st.Left)
	}
}
