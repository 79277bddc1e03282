package versions

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"
)

// BenchmarkThousandVersions captures 1,000 versions of a 20 KB memory note
// that change one line each (the bound: at most 2 MB on disk) and
// reports the database's size and the capture latency's p99 (bound 5 ms).
func BenchmarkThousandVersions(b *testing.B) {
	ctx := context.Background()
	var size, p99 float64
	for range b.N {
		b.StopTimer()
		s, root, dir, now := setup(b)
		p := filepath.Join(dir, "MEMORY.md")
		const lines = 250 // about 20 KB
		if n := len(note(lines, 0, 0)); n < 19000 || n > 21000 {
			b.Fatalf("the note is %d bytes, want about 20 KB", n)
		}
		var took []time.Duration
		b.StartTimer()
		for v := 1; v <= 1000; v++ {
			*now = now.Add(time.Minute)
			b.StopTimer()
			os.WriteFile(p, []byte(note(lines, (v*37)%lines, v)), 0o644)
			b.StartTimer()
			t0 := time.Now()
			if _, _, ok, err := s.Capture(ctx, root, "MEMORY.md", nil); err != nil || !ok {
				b.Fatalf("capture %d: %v %v", v, ok, err)
			}
			took = append(took, time.Since(t0))
		}
		b.StopTimer()
		s.db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`)
		size = float64(s.Size())
		sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
		p99 = float64(took[len(took)*99/100].Microseconds()) / 1000
		s.Close()
		b.StartTimer()
	}
	b.ReportMetric(size/(1<<20), "MiB/1000-versions")
	b.ReportMetric(p99, "p99-capture-ms")
	if size > 2<<20 {
		b.Errorf("1,000 versions take %.2f MiB on disk, bound 2 MiB", size/(1<<20))
	}
}

// Size is the database's size on disk, WAL included.
func (s *Store) Size() int64 {
	var n int64
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if fi, err := os.Stat(filepath.Join(s.dir, FileName+suffix)); err == nil {
			n += fi.Size()
		}
	}
	return n
}
