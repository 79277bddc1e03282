package spool

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/recall"
	"github.com/memwatch/memwatch/session"
)

func newSpool(t *testing.T) *Spool {
	t.Helper()
	s, err := Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func openRoot(t testing.TB, dir string) *confine.Root {
	t.Helper()
	r, err := confine.Open(dir, confine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

var opts = Options{IsMessage: session.IsMessage}

func msg(i int) string { return fmt.Sprintf(`{"role":"user","content":"message %d"}`, i) }

const meta = `{"_type":"metadata","updated_at":"%d"}`

func lines(ls ...string) string { return strings.Join(ls, "\n") + "\n" }

func msgs(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, msg(i))
	}
	return out
}

// replace writes content by temp file and rename, as nanobot saves.
func replace(t *testing.T, p, content string) {
	t.Helper()
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
}

// captured returns the text of every captured message line, in order.
func captured(t *testing.T, s *Spool, root *confine.Root, rel string) []string {
	t.Helper()
	st, ok, err := s.Find(context.Background(), root.ID(), rel)
	if err != nil || !ok {
		t.Fatalf("find: %v %v", ok, err)
	}
	var out []string
	s.Read(context.Background(), st.ID, 0, st.Seq, func(l Line) error {
		if l.Msg {
			out = append(out, string(l.Data))
		}
		return nil
	})
	return out
}

func TestCaptureScenarios(t *testing.T) {
	type step = captureStep
	appendTo := func(s string) func(*testing.T, string) {
		return func(t *testing.T, p string) {
			f, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			f.WriteString(s)
			f.Close()
		}
	}
	put := func(s string) func(*testing.T, string) {
		return func(t *testing.T, p string) { replace(t, p, s) }
	}
	inPlace := func(s string) func(*testing.T, string) {
		return func(t *testing.T, p string) { os.WriteFile(p, []byte(s), 0o644) }
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"appends, a partial line waits", []step{
			{appendTo(lines(msg(1), msg(2))), "new", 2, 1, 2},
			{appendTo(msg(3)), "same", 0, 1, 2},
			{appendTo("\n" + msg(4) + "\n"), "append", 2, 1, 4},
		}},
		{"memory-history: trim to the newest, keeping the metadata line", []step{
			{put(lines(append([]string{fmt.Sprintf(meta, 1)}, msgs(1, 8)...)...)), "new", 8, 1, 8},
			{put(lines(append([]string{fmt.Sprintf(meta, 2)}, msgs(6, 10)...)...)), "trimmed", 2, 2, 5},
			{appendTo(lines(msg(11))), "append", 1, 2, 6},
		}},
		{"nanobot: the whole file rewritten on every save", []step{
			{put(lines(append([]string{fmt.Sprintf(meta, 1)}, msgs(1, 3)...)...)), "new", 3, 1, 3},
			{put(lines(append([]string{fmt.Sprintf(meta, 2)}, msgs(1, 4)...)...)), "rewritten", 1, 1, 4},
			{inPlace(lines(append([]string{fmt.Sprintf(meta, 3)}, msgs(1, 5)...)...)), "append", 1, 1, 5},
			{put(lines(append([]string{fmt.Sprintf(meta, 4)}, msgs(1, 5)...)...)), "same", 0, 1, 5},
		}},
		{"/new clears, then new messages that repeat old ones", []step{
			{put(lines(msg(1), msg(2))), "new", 2, 1, 2},
			{put(lines(fmt.Sprintf(meta, 9))), "cleared", 0, 2, 0},
			{appendTo(lines(msg(1))), "append", 1, 2, 1},
		}},
		{"appended, then cleared before the next capture: the held file has it", []step{
			{put(lines(fmt.Sprintf(meta, 1), msg(1))), "new", 1, 1, 1},
			{func(t *testing.T, p string) {
				appendTo(lines(msg(2), msg(3)))(t, p)
				put(lines(fmt.Sprintf(meta, 2)))(t, p)
			}, "cleared", 2, 2, 0},
			{func(t *testing.T, p string) {
				appendTo(lines(msg(4)))(t, p)
				os.Remove(p)
			}, "gone", 1, 2, 0},
			{func(*testing.T, string) {}, "missing", 0, 2, 0}, // still gone: nothing to say
		}},
		{"replaced by unrelated content", []step{
			{put(lines(msgs(1, 3)...)), "new", 3, 1, 3},
			{put(lines(msgs(20, 21)...)), "replaced", 2, 2, 2},
		}},
		{"truncated to zero and grown again", []step{
			{appendTo(lines(msgs(1, 3)...)), "new", 3, 1, 3},
			{inPlace(""), "cleared", 0, 2, 0},
			{appendTo(lines(msgs(4, 5)...)), "append", 2, 2, 2},
		}},
		{"copy-truncate: rotated and regrown before the next look", []step{
			{appendTo(lines(msgs(1, 3)...)), "new", 3, 1, 3},
			{inPlace(lines(msgs(4, 5)...)), "replaced", 2, 2, 2},
		}},
		{"rewritten in place to the same size", []step{
			{appendTo(lines(msg(1), msg(2))), "new", 2, 1, 2},
			{inPlace(lines(msg(1), msg(3))), "trimmed", 1, 2, 2},
		}},
		{"deleted and created again", []step{
			{appendTo(lines(msg(1))), "new", 1, 1, 1},
			{func(t *testing.T, p string) { os.Remove(p) }, "gone", 0, 1, 0},
			{appendTo(lines(msg(1), msg(2))), "trimmed", 2, 2, 2},
		}},
	}
	// The same with each new line told through a recall.LineMemo, as
	// the daemon captures a log it indexes from the same read.
	memo := opts
	memo.Message = func(off int64, data []byte, hash uint64) bool {
		return recall.NewLineMemo().Message(off, data, hash)
	}
	for _, tt := range tests {
		for _, o := range []struct {
			name string
			o    Options
		}{{"", opts}, {"/memo", memo}} {
			t.Run(tt.name+o.name, func(t *testing.T) { runCaptureSteps(t, tt.steps, o.o) })
		}
	}
}

// captureStep is a step of a capture scenario: what the agent does to its
// log, then what the capture must say.
type captureStep struct {
	write   func(t *testing.T, p string)
	why     string
	newMsgs int   // messages captured by this step
	gen     int64 // live generation after it
	live    int64 // messages in the live file
}

// runCaptureSteps runs a scenario's steps against a new spool, a capture
// with o after each.
func runCaptureSteps(t *testing.T, steps []captureStep, o Options) {
	ctx := context.Background()
	s := newSpool(t)
	// Each step is a moment of its own, seconds after the one before: no
	// step is a trim still being written.
	now := time.Now()
	s.Now = func() time.Time { now = now.Add(3 * time.Second); return now }
	dir := t.TempDir()
	root := openRoot(t, dir)
	p := filepath.Join(dir, "s.jsonl")
	for i, st := range steps {
		st.write(t, p)
		res, err := s.Capture(ctx, root, "s.jsonl", o)
		if err != nil && st.why != "missing" {
			t.Fatalf("step %d: %v", i, err)
		}
		log, _, _ := s.Find(ctx, root.ID(), "s.jsonl")
		if res.Why != st.why || res.Messages != st.newMsgs || log.Gen != st.gen || log.LiveMsgs != st.live {
			t.Errorf("step %d: why %q, %d new messages, gen %d, %d live; want %q, %d, %d, %d",
				i, res.Why, res.Messages, log.Gen, log.LiveMsgs, st.why, st.newMsgs, st.gen, st.live)
		}
	}
}

// TestEveryMessageOnce: an agent that appends, trims to the newest ten,
// clears and rewrites its log; every message it wrote is captured exactly
// once, whatever it did between captures.
func TestEveryMessageOnce(t *testing.T) {
	ctx := context.Background()
	s := newSpool(t)
	dir := t.TempDir()
	root := openRoot(t, dir)
	p := filepath.Join(dir, "s.jsonl")
	var live []string
	next := 0
	save := func(version int) {
		replace(t, p, lines(append([]string{fmt.Sprintf(meta, version)}, live...)...))
	}
	for round := range 60 {
		for range round%4 + 1 {
			live = append(live, msg(next))
			next++
		}
		switch {
		case round%17 == 16:
			live = nil // /new
		case len(live) > 12:
			live = live[len(live)-10:] // trim to the newest
		}
		save(round)
		if round%3 != 0 { // memwatch does not see every state
			if _, err := s.Capture(ctx, root, "s.jsonl", opts); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := s.Capture(ctx, root, "s.jsonl", opts); err != nil {
		t.Fatal(err)
	}
	got := captured(t, s, root, "s.jsonl")
	seen := map[string]int{}
	for _, g := range got {
		seen[g]++
	}
	missing := 0
	for i := range next {
		switch seen[msg(i)] {
		case 0:
			missing++ // written and trimmed away between two captures: never seen
		case 1:
		default:
			t.Errorf("%s captured %d times", msg(i), seen[msg(i)])
		}
	}
	t.Logf("%d messages written, %d captured, %d never seen (trimmed between captures)", next, len(got), missing)
	if missing > next/3 {
		t.Errorf("%d of %d messages never captured", missing, next)
	}
}

func TestCitationsSurviveRewrites(t *testing.T) {
	ctx := context.Background()
	s := newSpool(t)
	dir := t.TempDir()
	root := openRoot(t, dir)
	p := filepath.Join(dir, "s.jsonl")
	replace(t, p, lines(append([]string{fmt.Sprintf(meta, 1)}, msgs(1, 6)...)...))
	s.Capture(ctx, root, "s.jsonl", opts)
	st, _, _ := s.Find(ctx, root.ID(), "s.jsonl")
	var rng []Line
	s.Read(ctx, st.ID, 0, st.Seq, func(l Line) error {
		if l.Msg && l.Line <= 4 {
			rng = append(rng, l)
		}
		return nil
	})
	cite := Cite("s.jsonl", rng)
	if cite != "s.jsonl#L2-4" {
		t.Fatalf("cite = %q", cite)
	}
	show := func(c string) []Shown {
		t.Helper()
		pc, err := ParseCitation(c)
		if err != nil {
			t.Fatal(err)
		}
		out, err := s.Show(ctx, root, pc)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := show(cite); len(got) != 3 || got[0].Source != "live" || string(got[0].Data) != msg(1) {
		t.Errorf("before the trim: %+v", got)
	}
	// The agent keeps the newest three: the citation still shows the same
	// text, from the spool.
	replace(t, p, lines(append([]string{fmt.Sprintf(meta, 2)}, msgs(4, 6)...)...))
	s.Capture(ctx, root, "s.jsonl", opts)
	got := show(cite)
	if len(got) != 3 || got[0].Source != "spool" || string(got[0].Data) != msg(1) || string(got[2].Data) != msg(3) {
		t.Errorf("after the trim: %+v", got)
	}
	// The new generation's lines are cited with it.
	os.WriteFile(p, []byte(lines(append([]string{fmt.Sprintf(meta, 2)}, msgs(4, 7)...)...)), 0o644)
	s.Capture(ctx, root, "s.jsonl", opts)
	st, _, _ = s.Find(ctx, root.ID(), "s.jsonl")
	var last []Line
	s.Read(ctx, st.ID, st.Seq-1, st.Seq, func(l Line) error { last = append(last, l); return nil })
	if c := Cite("s.jsonl", last); c != "s.jsonl@2#L5" {
		t.Errorf("new line cited %q, want s.jsonl@2#L5", c)
	}
	if got := show("s.jsonl@2#L2-5"); len(got) != 4 || got[0].Source != "live" || string(got[3].Data) != msg(7) {
		t.Errorf("generation 2: %+v", got)
	}
}

func TestHugeLineAndPrune(t *testing.T) {
	ctx := context.Background()
	s := newSpool(t)
	dir := t.TempDir()
	root := openRoot(t, dir)
	huge := `{"role":"user","content":"` + strings.Repeat("z", 3<<20) + `"}`
	os.WriteFile(filepath.Join(dir, "s.jsonl"), []byte(lines(msg(1), huge, msg(2))), 0o644)
	res, err := s.Capture(ctx, root, "s.jsonl", Options{MaxLine: 4096, IsMessage: session.IsMessage})
	if err != nil || res.Lines != 3 || res.Messages != 3 {
		t.Fatalf("capture: %+v, %v", res, err)
	}
	st, _, _ := s.Find(ctx, root.ID(), "s.jsonl")
	var cut Line
	s.Read(ctx, st.ID, 1, 2, func(l Line) error { cut = l; return nil })
	if !cut.Cut() || len(cut.Data) != 4096 || cut.Size != int64(len(huge)) {
		t.Errorf("huge line: %d bytes kept of %d", len(cut.Data), cut.Size)
	}
	// Nothing is pruned before its consumer is done with it.
	if ps, _ := s.Prune(ctx, time.Now().Add(time.Hour)); ps.Lines != 0 {
		t.Errorf("pruned %d lines nobody read", ps.Lines)
	}
	s.Commit(ctx, "c", st.ID, 2)
	ps, err := s.Prune(ctx, time.Now().Add(time.Hour))
	if err != nil || ps.Lines != 2 {
		t.Errorf("prune = %+v, %v; want the two lines read", ps, err)
	}
	var kept int
	s.Read(ctx, st.ID, 0, 3, func(l Line) error {
		if l.Data != nil {
			kept++
		}
		return nil
	})
	if kept != 1 {
		t.Errorf("%d lines keep their text, want 1", kept)
	}
}

// FuzzCapture feeds arbitrary bytes as a log, then a rewrite of it, and
// checks that every complete line is accounted for once per version seen.
func FuzzCapture(f *testing.F) {
	f.Add([]byte(lines(msg(1), msg(2))), []byte(lines(msg(2), msg(3))))
	f.Add([]byte("\xff\xfe\n{\n"), []byte(""))
	f.Add([]byte(lines(fmt.Sprintf(meta, 1), msg(1))), []byte(lines(fmt.Sprintf(meta, 2), msg(1), msg(1))))
	ctx := context.Background()
	s, err := Open(ctx, f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	dir := f.TempDir()
	root, err := confine.Open(dir, confine.Options{})
	if err != nil {
		f.Fatal(err)
	}
	defer root.Close()
	n := 0
	f.Fuzz(func(t *testing.T, first, second []byte) {
		n++
		name := fmt.Sprintf("s%d.jsonl", n)
		p := filepath.Join(dir, name)
		defer os.Remove(p)
		o := Options{MaxLine: 64, IsMessage: session.IsMessage}
		for i, content := range [][]byte{first, second} {
			os.WriteFile(p, content, 0o644)
			res, err := s.Capture(ctx, root, name, o)
			if err != nil {
				t.Fatalf("version %d: %v", i, err)
			}
			st, _, _ := s.Find(ctx, root.ID(), name)
			if want := int64(strings.Count(string(content), "\n")); st.Lines != want {
				t.Fatalf("version %d: %d lines in the live generation, want %d (%+v)", i, st.Lines, want, res)
			}
			if st.LiveMsgs > st.Lines {
				t.Fatalf("version %d: %d live messages in %d lines", i, st.LiveMsgs, st.Lines)
			}
		}
	})
}

// TestTrimSeenHalfWritten: the agent trims its log in place (truncate, then
// write the metadata line and the kept messages); memwatch captures it
// while only the metadata is there, then again with the messages. The kept
// messages are the tail of the first generation, recognised by content:
// each message is captured exactly once across the boundary.
func TestTrimSeenHalfWritten(t *testing.T) {
	ctx := context.Background()
	s := newSpool(t)
	now := time.Now()
	s.Now = func() time.Time { return now }
	dir := t.TempDir()
	root := openRoot(t, dir)
	p := filepath.Join(dir, "s.jsonl")
	appendTo := func(content string) {
		f, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		f.WriteString(content)
		f.Close()
	}
	capture := func(why string, newMsgs, known int) {
		t.Helper()
		res, err := s.Capture(ctx, root, "s.jsonl", opts)
		if err != nil {
			t.Fatal(err)
		}
		if res.Why != why || res.Messages != newMsgs || res.Known != known {
			t.Errorf("capture: why %q, %d new messages, %d known; want %q, %d, %d", res.Why, res.Messages, res.Known, why, newMsgs, known)
		}
	}
	appendTo(lines(append([]string{fmt.Sprintf(meta, 1)}, msgs(0, 50)...)...))
	capture("new", 51, 0)
	// The first trim: truncated in place, the metadata written first.
	os.WriteFile(p, []byte(lines(fmt.Sprintf(meta, 2))), 0o644)
	capture("cleared", 0, 0)
	appendTo(lines(msgs(41, 45)...))
	capture("append", 0, 5)
	appendTo(lines(msgs(46, 50)...))
	capture("append", 0, 5)
	appendTo(lines(msgs(51, 52)...))
	capture("append", 2, 0)
	// A genuine /new: the user's next message comes seconds later, and is
	// new even when it says what the last session said.
	os.WriteFile(p, []byte(lines(fmt.Sprintf(meta, 3))), 0o644)
	capture("cleared", 0, 0)
	now = now.Add(5 * time.Second)
	appendTo(lines(msg(51), msg(60)))
	capture("append", 2, 0)
	log, _, _ := s.Find(ctx, root.ID(), "s.jsonl")
	if log.LiveMsgs != 2 {
		t.Errorf("%d live messages, want 2", log.LiveMsgs)
	}
	seen := map[string]int{}
	for _, g := range captured(t, s, root, "s.jsonl") {
		seen[g]++
	}
	for i := 0; i <= 52; i++ {
		want := 1
		if i == 51 {
			want = 2 // said again in the new session
		}
		if seen[msg(i)] != want {
			t.Errorf("%s captured %d times, want %d", msg(i), seen[msg(i)], want)
		}
	}
}

// An agent that rewrites its whole transcript in place on every turn
// (O_TRUNC, then every line again: OpenClaw up to 2026.7.1) may be seen
// at any point of the write. Whatever point, every message is captured
// once: the messages that come back after a half-written capture are the
// ones already captured.
func TestWholeFileRewriteSeenPartWritten(t *testing.T) {
	ctx := context.Background()
	for _, seenAt := range []int{0, 1, 7, 19, 20} { // messages written when captured
		t.Run(fmt.Sprint(seenAt), func(t *testing.T) {
			s := newSpool(t)
			dir := t.TempDir()
			root := openRoot(t, dir)
			p := filepath.Join(dir, "s.jsonl")
			header := `{"type":"session","id":"x"}`
			var all []string
			for turn := 0; turn < 4; turn++ {
				all = append(all, msgs(5*turn, 5*turn+4)...)
				// A state line after each turn's messages (OpenClaw's
				// bootstrap-context entries).
				all = append(all, fmt.Sprintf(`{"type":"custom","customType":"turn-end","turn":%d}`, turn))
				whole := append([]string{header}, all...)
				// The rewrite: truncated, then written line by line; the
				// capture comes after seenAt of the messages.
				f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
				if err != nil {
					t.Fatal(err)
				}
				for i, l := range whole {
					if i-1 == min(seenAt, len(all)) && i > 0 {
						if _, err := s.Capture(ctx, root, "s.jsonl", opts); err != nil {
							t.Fatal(err)
						}
					}
					f.WriteString(l + "\n")
				}
				f.Close()
				if _, err := s.Capture(ctx, root, "s.jsonl", opts); err != nil {
					t.Fatal(err)
				}
			}
			seen := map[string]int{}
			for _, g := range captured(t, s, root, "s.jsonl") {
				seen[g]++
			}
			for i := 0; i < 20; i++ {
				if seen[msg(i)] != 1 {
					t.Errorf("%s captured %d times, want 1", msg(i), seen[msg(i)])
				}
			}
			// The metadata lines, unchanged in every rewrite, are stored
			// once and carried into each generation, whether the capture
			// saw them at once or written back after it.
			st, _, _ := s.Find(ctx, root.ID(), "s.jsonl")
			stored := map[string]int{}
			s.Read(ctx, st.ID, 0, st.Seq, func(l Line) error {
				if !l.Msg {
					stored[string(l.Data)]++
				}
				return nil
			})
			for line, n := range stored {
				if n != 1 {
					t.Errorf("%s stored %d times over 4 rewrites, want 1", line, n)
				}
			}
		})
	}
}

// TestRewriteToTheSameSize: an agent rewrites its log in place to the same
// size, its last line unchanged (found by FuzzCapture): the lines before it
// changed, and are captured.
func TestRewriteToTheSameSize(t *testing.T) {
	ctx := context.Background()
	s := newSpool(t)
	dir := t.TempDir()
	root := openRoot(t, dir)
	p := filepath.Join(dir, "s.jsonl")
	os.WriteFile(p, []byte(lines(msg(1), msg(9))), 0o644)
	if _, err := s.Capture(ctx, root, "s.jsonl", opts); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(p, []byte(lines(msg(2), msg(9))), 0o644) // same size, same last line
	if _, err := s.Capture(ctx, root, "s.jsonl", opts); err != nil {
		t.Fatal(err)
	}
	if got := captured(t, s, root, "s.jsonl"); !slices.Contains(got, msg(2)) {
		t.Errorf("captured %q, want the rewritten line %s too", got, msg(2))
	}
}

// TestAppendedLogIsNotReadAgain: a log that only grows is never read whole
// again, however often it is captured between appends, right after a
// write or long after (issue #44: a rematch of the whole log on every
// evaluation of a growing log made its cost grow with its size). A
// rewrite in place to the same size in that time is still seen.
func TestAppendedLogIsNotReadAgain(t *testing.T) {
	ctx := context.Background()
	s := newSpool(t)
	dir := t.TempDir()
	root := openRoot(t, dir)
	p := filepath.Join(dir, "s.jsonl")
	os.WriteFile(p, []byte(lines(msgs(1, 1000)...)), 0o644)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := 1001; i <= 1100; i++ {
		f.WriteString(msg(i) + "\n")
		for range 3 { // the capture at the write, then the rules' own
			if _, err := s.Capture(ctx, root, "s.jsonl", opts); err != nil {
				t.Fatal(err)
			}
		}
		if i%25 == 0 {
			time.Sleep(2 * mtimeSlack) // settled: the mtime alone tells
			s.Capture(ctx, root, "s.jsonl", opts)
		}
	}
	if got := s.rematches.Load(); got != 0 {
		t.Errorf("a growing log was read whole %d times, want 0", got)
	}
	if got := captured(t, s, root, "s.jsonl"); len(got) != 1100 {
		t.Errorf("captured %d messages, want 1100", len(got))
	}
	// Rewritten in place to the same size, at once and after a while.
	for k, wait := range []time.Duration{0, 2 * mtimeSlack} {
		b, _ := os.ReadFile(p)
		b = []byte(strings.Replace(string(b), msg(500+k), msg(900+k), 1))
		time.Sleep(wait)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Capture(ctx, root, "s.jsonl", opts); err != nil {
			t.Fatal(err)
		}
		if got := captured(t, s, root, "s.jsonl"); len(got) != 1101+k {
			t.Errorf("after a same-size rewrite (wait %v): captured %d messages, want the rewritten one too", wait, len(got))
		}
	}
}

// heldRoots are three roots of a log captured by s: "gone" (deleted
// since), "rewritten" (its second generation captured), "quiet" (live,
// never rewritten).
func heldRoots(t *testing.T, s *Spool, opt Options) map[string]*confine.Root {
	t.Helper()
	ctx := context.Background()
	dirs := map[string]string{"gone": t.TempDir(), "rewritten": t.TempDir(), "quiet": t.TempDir()}
	roots := map[string]*confine.Root{}
	for name, dir := range dirs {
		roots[name] = openRoot(t, dir)
		os.WriteFile(filepath.Join(dir, "s.jsonl"), []byte(lines(msgs(0, 5)...)), 0o644)
		if _, err := s.Capture(ctx, roots[name], "s.jsonl", opt); err != nil {
			t.Fatal(err)
		}
	}
	os.Remove(filepath.Join(dirs["gone"], "s.jsonl"))
	replace(t, filepath.Join(dirs["rewritten"], "s.jsonl"), lines(msgs(10, 12)...))
	for _, name := range []string{"gone", "rewritten"} {
		if _, err := s.Capture(ctx, roots[name], "s.jsonl", opt); err != nil {
			t.Fatal(err)
		}
	}
	return roots
}

// TestGensHeldAsSearchHeld: a search's Held (one query says which roots
// hold anything) finds what SearchHeld finds in each root: a deleted
// log's lines, a rewritten log's earlier generation, nothing in a root
// whose logs are all live and never rewritten.
func TestGensHeldAsSearchHeld(t *testing.T) {
	ctx := context.Background()
	s := newSpool(t)
	opt := Options{IsMessage: func(b []byte, cut bool) bool { return bytes.Contains(b, []byte(`"role"`)) }}
	roots := heldRoots(t, s, opt)
	g := s.Gens(ctx)
	for name, r := range roots {
		var want, got []string
		s.SearchHeld(ctx, r, func(rel string, gen, line int64, raw []byte) error {
			want = append(want, fmt.Sprint(rel, gen, line, string(raw)))
			return nil
		})
		g.Held(ctx, r, func(rel string, gen, line int64, raw []byte) error {
			got = append(got, fmt.Sprint(rel, gen, line, string(raw)))
			return nil
		})
		if !slices.Equal(got, want) {
			t.Errorf("%s: held %q, want %q", name, got, want)
		}
		if (len(want) > 0) != (name != "quiet") {
			t.Errorf("%s: %d lines held", name, len(want))
		}
	}
	if got, want := g.Of(roots["rewritten"], "s.jsonl"), int64(2); got != want {
		t.Errorf("the rewritten log's generation: %d, want %d", got, want)
	}
	if got := g.Of(roots["quiet"], "s.jsonl"); got != 0 {
		t.Errorf("the quiet log's generation: %d, want 0 (never rewritten)", got)
	}
}

// TestCaptureToldByMessage: with Options.Message, each whole line appended
// is told by it, given its file offset and hash; a line cut at MaxLine is
// told by IsMessage; what is captured is the same as without.
func TestCaptureToldByMessage(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	root := openRoot(t, dir)
	long := `{"role":"user","content":"` + strings.Repeat("x", 200) + `"}`
	content := lines(msg(1), `{"type":"summary","summary":"s"}`, long, "not json", msg(2))
	os.WriteFile(filepath.Join(dir, "s.jsonl"), []byte(content), 0o644)
	type told struct {
		off  int64
		line string
	}
	var byMessage, byIsMessage []told
	o := Options{MaxLine: 100,
		IsMessage: func(data []byte, cut bool) bool {
			byIsMessage = append(byIsMessage, told{-1, string(data)})
			return session.IsMessage(data, cut)
		},
		Message: func(off int64, data []byte, hash uint64) bool {
			if hash != xxhash.Sum64(data) {
				t.Errorf("the line at %d came with another hash", off)
			}
			byMessage = append(byMessage, told{off, string(data)})
			return session.IsMessage(data, false)
		}}
	s := newSpool(t)
	got, err := s.Capture(ctx, root, "s.jsonl", o)
	if err != nil {
		t.Fatal(err)
	}
	var want []told
	off := int64(0)
	for _, l := range strings.SplitAfter(strings.TrimSuffix(content, "\n"), "\n") {
		if l = strings.TrimSuffix(l, "\n"); l != long {
			want = append(want, told{off, l})
		}
		off += int64(len(l)) + 1
	}
	if !slices.Equal(byMessage, want) {
		t.Errorf("told by Message: %+v, want %+v", byMessage, want)
	}
	if len(byIsMessage) != 1 || byIsMessage[0].line != long[:100] {
		t.Errorf("told by IsMessage: %+v, want the long line cut", byIsMessage)
	}
	plain, err := newSpool(t).Capture(ctx, root, "s.jsonl", Options{MaxLine: 100, IsMessage: session.IsMessage})
	if err != nil {
		t.Fatal(err)
	}
	if got != plain {
		t.Errorf("captured %+v, without Message %+v", got, plain)
	}
}

// TestHeldOfContinues: HeldOf reads of one log what Held reads of it, and
// from a sequence number on, what was captured after it: a tally of a
// database's conversation reads its new records only.
func TestHeldOfContinues(t *testing.T) {
	ctx := context.Background()
	s := newSpool(t)
	opt := Options{IsMessage: func(b []byte, cut bool) bool { return bytes.Contains(b, []byte(`"role"`)) }}
	roots := heldRoots(t, s, opt)
	db := openRoot(t, t.TempDir())
	roots["db"] = db
	rec := func(k int64) Record {
		return Record{Key: k, Data: []byte(fmt.Sprintf(`{"role":"user","content":"record %d"}`, k))}
	}
	if _, err := s.CaptureRecords(ctx, db.ID(), "agent.db#s1", []Record{rec(1), rec(2)}, opt); err != nil {
		t.Fatal(err)
	}
	held := func(r *confine.Root, l Log, after int64) []string {
		t.Helper()
		var out []string
		if err := s.HeldOf(ctx, l, after, func(h HeldLine) error {
			out = append(out, fmt.Sprint(h.Path, h.Gen, h.Line, string(h.Data)))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	logOf := func(r *confine.Root) Log {
		t.Helper()
		logs, err := s.Logs(ctx, r.ID())
		if err != nil || len(logs) != 1 {
			t.Fatalf("logs: %v, %v", logs, err)
		}
		return logs[0]
	}
	for name, r := range roots {
		var want []string
		s.SearchHeld(ctx, r, func(rel string, gen, line int64, raw []byte) error {
			want = append(want, fmt.Sprint(rel, gen, line, string(raw)))
			return nil
		})
		l := logOf(r)
		got := held(r, l, 0)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: HeldOf read %q, want %q", name, got, want)
		}
		if l.HoldsLines() != (len(want) > 0) {
			t.Errorf("%s: HoldsLines %v with %d lines held", name, l.HoldsLines(), len(want))
		}
	}
	first := logOf(db)
	if _, err := s.CaptureRecords(ctx, db.ID(), "agent.db#s1", []Record{rec(1), rec(2), rec(3)}, opt); err != nil {
		t.Fatal(err)
	}
	got := held(db, logOf(db), first.Seq)
	if want := []string{fmt.Sprint("agent.db#s1", int64(1), int64(3), string(rec(3).Data))}; !slices.Equal(got, want) {
		t.Errorf("after %d: %q, want %q", first.Seq, got, want)
	}
	if got := held(db, first, first.Seq); len(got) != 0 {
		t.Errorf("after the log's last sequence number, as listed before: %q, want none", got)
	}
}

// TestHeldOfLogsAsHeldOf: past manyHeldLogs logs, HeldOfLogs reads the
// root's held lines in one pass; what it gives is what HeldOf gives of
// each, from each log's sequence number on.
func TestHeldOfLogsAsHeldOf(t *testing.T) {
	ctx := context.Background()
	s := newSpool(t)
	opt := Options{IsMessage: func(b []byte, cut bool) bool { return true }}
	db := openRoot(t, t.TempDir())
	for i := range manyHeldLogs + 6 {
		recs := []Record{{Key: 1, Data: []byte(fmt.Sprintf(`{"role":"user","content":"%d-1"}`, i))}, {Key: 2, Data: []byte(fmt.Sprintf(`{"role":"user","content":"%d-2"}`, i))}}
		if _, err := s.CaptureRecords(ctx, db.ID(), fmt.Sprintf("agent.db#s%d", i), recs, opt); err != nil {
			t.Fatal(err)
		}
	}
	logs, err := s.Logs(ctx, db.ID())
	if err != nil {
		t.Fatal(err)
	}
	after := func(l Log) int64 { return l.ID % 3 } // 0, 1 or 2 of each log's two lines read before
	for _, n := range []int{manyHeldLogs, len(logs)} {
		var got, want []string
		for _, l := range logs[:n] {
			s.HeldOf(ctx, l, after(l), func(h HeldLine) error {
				want = append(want, fmt.Sprint(h.Log, h.Seq, string(h.Data)))
				return nil
			})
		}
		if err := s.HeldOfLogs(ctx, db.ID(), logs[:n], after, func(h HeldLine) error {
			got = append(got, fmt.Sprint(h.Log, h.Seq, string(h.Data)))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) || len(want) == 0 {
			t.Errorf("%d logs: HeldOfLogs gave %d lines, HeldOf %d:\n%q\n%q", n, len(got), len(want), got, want)
		}
	}
}

func TestLogGrownSince(t *testing.T) {
	l := Log{Seq: 10, Gen: 2}
	for _, c := range []struct {
		then  Log
		seq   int64
		grown bool
	}{
		{Log{Seq: 7, Gen: 2}, 7, true},
		{Log{Seq: 10, Gen: 2}, 10, true},
		{Log{Seq: 7, Gen: 1}, 7, false},
		{Log{Seq: 7, Gen: 2, Missing: true}, 7, false},
		{Log{Seq: 12, Gen: 2}, 12, false},
	} {
		seq, grown := l.GrownSince(c.then.Stamp())
		if seq != c.seq || grown != c.grown {
			t.Errorf("since %s: got %d, %v; want %d, %v", c.then.Stamp(), seq, grown, c.seq, c.grown)
		}
	}
	if _, grown := l.GrownSince("not a stamp"); grown {
		t.Error("grown since a stamp that is none")
	}
	other := Log{Seq: 7, Gen: 2, Path: "other.jsonl"}
	if _, grown := l.GrownSince(other.Stamp()); grown || other.Stamp() == (Log{Seq: 7, Gen: 2}).Stamp() {
		t.Error("another log's stamp of the same numbers vouches for this one")
	}
}
