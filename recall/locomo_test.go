package recall

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/recall/locomo"
)

// TestLoCoMo measures ranked recall in the process on a conversation QA
// set in LoCoMo's format (MEMWATCH_LOCOMO: its zip, or a directory of its
// JSON files): evidence recall@10 per category, as make bench-relevance
// measures it through the CLI, in seconds rather than minutes, for work
// on the ranking. MEMWATCH_LOCOMO_MISSES names a file for the questions
// that missed evidence, with what was found.
func TestLoCoMo(t *testing.T) {
	data := os.Getenv("MEMWATCH_LOCOMO")
	if data == "" {
		t.Skip("MEMWATCH_LOCOMO names no data set (../shared/recall/locomo10.zip)")
	}
	convs, err := locomo.Read(data)
	if err != nil {
		t.Fatal(err)
	}
	var misses io.Writer = io.Discard
	if p := os.Getenv("MEMWATCH_LOCOMO_MISSES"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		misses = f
	}
	cats := locomo.Categories
	var sum [5]float64
	var n [5]int
	var lat []time.Duration
	for ci, c := range convs {
		dir := filepath.Join(t.TempDir(), fmt.Sprintf("c%02d", ci))
		where, err := c.Write(dir)
		if err != nil {
			t.Fatal(err)
		}
		text := map[string]string{}
		for k, ts := range c.Sessions {
			for _, tu := range ts {
				text[tu.DiaID] = fmt.Sprintf("[%s] %s: %s", c.Dates[k], tu.Speaker, tu.Text)
			}
		}
		root := openRoot(t, dir)
		srcs := []Source{{Glob: "sessions/*.jsonl", Kind: Log, Label: "messages"}}
		for _, q := range c.QA {
			if q.Category < 1 || q.Category > 4 || len(q.Evidence) == 0 {
				continue
			}
			pq, err := ParseQuery(q.Question)
			if err != nil {
				continue
			}
			t0 := time.Now()
			res, _, err := Search(context.Background(), pq, Options{Roots: []Root{{Root: root, Sources: srcs}}, Limit: 10, Explain: true})
			lat = append(lat, time.Since(t0))
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			for _, r := range res {
				got[where[r.Citation]] = true
			}
			share := locomo.Share(q.Evidence, got)
			sum[q.Category] += share
			n[q.Category]++
			if share < 1 {
				fmt.Fprintf(misses, "== c%02d [%s] %s (answer %v)\n", ci, cats[q.Category], q.Question, string(q.Answer))
				for _, e := range q.Evidence {
					e = strings.TrimSpace(e)
					mark := "MISS"
					if got[e] {
						mark = "ok  "
					}
					fmt.Fprintf(misses, "  %s %s %s\n", mark, e, text[e])
				}
				for i, r := range res {
					fmt.Fprintf(misses, "  got %d %s %s %.60s | %s\n", i+1, where[r.Citation], r.Citation, r.Text, r.Why)
				}
			}
		}
	}
	var all float64
	var total int
	for k := 1; k <= 4; k++ {
		t.Logf("%-12s %4d questions: %.1f%%", cats[k], n[k], 100*sum[k]/float64(max(1, n[k])))
		all += sum[k]
		total += n[k]
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("all          %4d questions: %.1f%% (p50 %v)", total, 100*all/float64(max(1, total)), lat[len(lat)/2])
}
