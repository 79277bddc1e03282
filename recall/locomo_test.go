package recall

import (
	"archive/zip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
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
	convs := readLoCoMo(t, data)
	var misses io.Writer = io.Discard
	if p := os.Getenv("MEMWATCH_LOCOMO_MISSES"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		misses = f
	}
	cats := []string{"", "multi-hop", "temporal", "open-domain", "single-hop"}
	var sum [5]float64
	var n [5]int
	var lat []time.Duration
	for ci, c := range convs {
		dir := filepath.Join(t.TempDir(), fmt.Sprintf("c%02d", ci))
		where, text := c.write(t, dir)
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
			hit := 0
			for _, e := range q.Evidence {
				if got[strings.TrimSpace(e)] {
					hit++
				}
			}
			sum[q.Category] += float64(hit) / float64(len(q.Evidence))
			n[q.Category]++
			if hit < len(q.Evidence) {
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

type locomoConv struct {
	speakerA string
	sessions [][]struct {
		Speaker string `json:"speaker"`
		DiaID   string `json:"dia_id"`
		Text    string `json:"text"`
	}
	dates []string
	QA    []struct {
		Question string          `json:"question"`
		Answer   json.RawMessage `json:"answer"`
		Evidence []string        `json:"evidence"`
		Category int             `json:"category"`
	}
}

func readLoCoMo(t *testing.T, path string) []locomoConv {
	var files [][]byte
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		ms, _ := filepath.Glob(filepath.Join(path, "*.json"))
		for _, m := range ms {
			b, err := os.ReadFile(m)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, b)
		}
	} else {
		z, err := zip.OpenReader(path)
		if err != nil {
			t.Fatal(err)
		}
		defer z.Close()
		sort.Slice(z.File, func(i, j int) bool { return z.File[i].Name < z.File[j].Name })
		for _, f := range z.File {
			if !strings.HasSuffix(f.Name, ".json") || strings.Contains(f.Name, "__MACOSX") {
				continue
			}
			r, _ := f.Open()
			b, err := io.ReadAll(r)
			r.Close()
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, b)
		}
	}
	var out []locomoConv
	for _, b := range files {
		var raw map[string]json.RawMessage
		if json.Unmarshal(b, &raw) != nil {
			continue
		}
		var c locomoConv
		json.Unmarshal(raw["speaker_a"], &c.speakerA)
		for k := 1; ; k++ {
			s, ok := raw[fmt.Sprintf("session_%d", k)]
			if !ok {
				break
			}
			var ts []struct {
				Speaker string `json:"speaker"`
				DiaID   string `json:"dia_id"`
				Text    string `json:"text"`
			}
			json.Unmarshal(s, &ts)
			var date string
			json.Unmarshal(raw[fmt.Sprintf("session_%d_date_time", k)], &date)
			c.sessions, c.dates = append(c.sessions, ts), append(c.dates, date)
		}
		json.Unmarshal(raw["qa"], &c.QA)
		if len(c.sessions) > 0 && len(c.QA) > 0 {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no conversation in %s", path)
	}
	return out
}

// write lays a conversation out as the relevance benchmark does: a
// sessions/session_N.jsonl per session, a message per turn.
func (c locomoConv) write(t *testing.T, root string) (where, text map[string]string) {
	os.MkdirAll(filepath.Join(root, "sessions"), 0o755)
	where, text = map[string]string{}, map[string]string{}
	for k, ts := range c.sessions {
		when, err := time.Parse("3:04 pm on 2 January, 2006", c.dates[k])
		if err != nil {
			when = time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC)
		}
		var b strings.Builder
		for i, tu := range ts {
			role := "assistant"
			if tu.Speaker == c.speakerA {
				role = "user"
			}
			line, _ := json.Marshal(map[string]string{"role": role, "content": tu.Speaker + ": " + tu.Text, "timestamp": when.Add(time.Duration(i) * time.Minute).Format(time.RFC3339)})
			b.Write(line)
			b.WriteByte('\n')
			where[fmt.Sprintf("sessions/session_%d.jsonl#L%d", k+1, i+1)] = tu.DiaID
			text[tu.DiaID] = fmt.Sprintf("[%s] %s: %s", c.dates[k], tu.Speaker, tu.Text)
		}
		if err := os.WriteFile(filepath.Join(root, "sessions", fmt.Sprintf("session_%d.jsonl", k+1)), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return where, text
}
