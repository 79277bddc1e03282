package capture

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/layout/sessiondetail"
	"github.com/memwatch/memwatch/metrics"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/recall"
	"github.com/memwatch/memwatch/session"
	"github.com/memwatch/memwatch/spool"
)

// appendMessages appends n messages of about 1 KiB each to path, as an
// agent writes them (O_APPEND), numbered from first.
func appendMessages(t *testing.T, path string, first, n int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := first; i < first+n; i++ {
		b, _ := json.Marshal(map[string]any{"role": "user", "content": fmt.Sprintf("message %d about the wombat%d deploy: %s", i, i, strings.Repeat("lorem ipsum ", 80)), "timestamp": "2026-11-30T10:00:00Z"})
		if _, err := f.Write(append(b, '\n')); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCaptureIndexesFromOneRead: a session log's capture indexes it from
// the lines it read when its index is behind by oneReadFrom or more, and
// only then: the spool holds every line, the index covers the file after
// each capture, an unchanged log reads nothing more, and a log whose
// index is up to date is captured without decoding it for the index.
func TestCaptureIndexesFromOneRead(t *testing.T) {
	ctx := context.Background()
	dir, stateDir := t.TempDir(), t.TempDir()
	sp, err := spool.Open(ctx, stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	root, err := confine.Open(dir, confine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	w := New(Config{IndexDir: filepath.Join(stateDir, "index"), Spool: sp, Indexes: recall.NewIndexCache(8 << 20), Segments: recall.NewSegmentListing(),
		Metrics: metrics.New("test"), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		StateFailed: func(store, root, what string, err error) bool { t.Errorf("%s: %v", what, err); return true }})
	defer w.Close()
	rt := Store{Policy: &policy.Store{Name: "s", Layout: "session-detail", MaxLine: 1 << 20}, Layout: sessiondetail.Layout{}}
	rel := sessiondetail.MessagesFile
	path := filepath.Join(dir, rel)
	o := spool.Options{IsMessage: session.IsMessage}

	captureAs := func(step string, behind bool) (spool.Result, int) {
		t.Helper()
		indexed := 0
		res, err := w.captureIndexed(ctx, rt, root, rel, behind, o, func(lines *recall.LineMemo) {
			indexed++
			w.indexWith(root, rt, rel, recall.Log, lines)
		})
		if err != nil {
			t.Fatalf("%s: capture: %v", step, err)
		}
		return res, indexed
	}
	// capture is a rule's (CaptureLog): it asks whether the index is
	// behind at the first new line.
	capture := func(step string) (spool.Result, int) { return captureAs(step, false) }
	covered := func(step string) {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := recall.Covered(w.IndexDir, root.Path(), rel); got != fi.Size() {
			t.Errorf("%s: the index covers %d bytes, want the file's %d", step, got, fi.Size())
		}
		if w.logIndexBehind(rt, root, rel) {
			t.Errorf("%s: the index is still behind", step)
		}
	}

	appendMessages(t, path, 0, 200) // about 200 KiB: behind by more than oneReadFrom
	if !w.logIndexBehind(rt, root, rel) {
		t.Fatal("a new log of 200 KiB: its index is not behind")
	}
	res, indexed := capture("first")
	if res.Lines != 200 || res.Messages != 200 || indexed != 1 {
		t.Errorf("first capture: %d lines, %d messages, indexed %d times; want 200, 200, 1", res.Lines, res.Messages, indexed)
	}
	covered("first")

	// Nothing new: nothing read for the index, whoever asks (the index
	// pass, indexRoot, found it behind before a rule's capture did both).
	for _, behind := range []bool{false, true} {
		if res, indexed := captureAs("unchanged", behind); res.Lines != 0 || indexed != 0 {
			t.Errorf("unchanged log, behind %v: %d lines, indexed %d times; want 0, 0", behind, res.Lines, indexed)
		}
	}

	// An agent appends 100 KiB: captured and indexed from the same read.
	appendMessages(t, path, 200, 100)
	if res, indexed := capture("appended"); res.Lines != 100 || indexed != 1 {
		t.Errorf("appended: %d lines, indexed %d times; want 100, 1", res.Lines, indexed)
	}
	covered("appended")

	// A few lines: less than oneReadFrom behind, the indexer's own pass
	// reads them (the capture does not decode them for it).
	appendMessages(t, path, 300, 3)
	if res, indexed := capture("a few lines"); res.Lines != 3 || indexed != 0 {
		t.Errorf("a few lines: %d lines, indexed %d times; want 3, 0", res.Lines, indexed)
	}
	w.indexFile(root, rt, rel, recall.Log)
	covered("a few lines, then the indexer's pass")

	// The spool holds every line as the agent wrote it.
	st, ok, err := sp.Find(ctx, root.ID(), rel)
	if err != nil || !ok {
		t.Fatalf("the log is not in the spool: %v", err)
	}
	var got []byte
	sp.Read(ctx, st.ID, 0, st.Seq, func(l spool.Line) error { got = append(append(got, l.Data...), '\n'); return nil })
	if want, _ := os.ReadFile(path); string(got) != string(want) {
		t.Errorf("the spool holds %d bytes of the log's %d, not as written", len(got), len(want))
	}
}
