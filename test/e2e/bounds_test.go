package e2e

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/confine"
)

// TestHugeDatabaseRows: an opencode database whose messages carry 50 MB
// text parts (an agent pasting a log). The daemon reads each in part,
// within its memory (peak RSS at most 256 MiB), every big message is
// recalled by its first words and cited, and the bound is logged once.
// MEMWATCH_HUGE_ROW_MIB sets a row's size (default 50).
func TestHugeDatabaseRows(t *testing.T) {
	t.Parallel() // mostly waits on daemons: beside the other such tests
	if testing.Short() {
		t.Skip("-short: writes a database of 500 MB")
	}
	mib := 50
	if n, err := strconv.Atoi(os.Getenv("MEMWATCH_HUGE_ROW_MIB")); err == nil && n > 0 {
		mib = n
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "home", ".local", "share", "opencode")
	os.MkdirAll(root, 0o755)
	dbPath := filepath.Join(root, "opencode.db")
	// Large pages and no journal while the rows go in: the writes under
	// the race detector took a minute at 4 KiB pages through a WAL.
	db, err := sql.Open("sqlite", confine.SQLiteURI(dbPath, "_pragma=page_size(65536)&_pragma=journal_mode(OFF)&_pragma=synchronous(OFF)"))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE session(id TEXT, parent_id TEXT); CREATE TABLE message(id TEXT, session_id TEXT, time_created INTEGER, data TEXT);
		CREATE TABLE part(id TEXT, message_id TEXT, session_id TEXT, data TEXT); INSERT INTO session VALUES('ses_1', NULL)`); err != nil {
		t.Fatal(err)
	}
	// Each row's JSON is the filler (no character JSON escapes) between
	// its own head and the tail, joined once: every copy of 50 MB costs
	// seconds under the race detector.
	filler := `", "type": "text"}`
	filler = strings.Repeat("a pasted build log line that goes on and on ", (mib<<20)/45) + filler
	const rows = 10
	for i := range rows {
		id := fmt.Sprintf("msg_%02d", i)
		data, _ := json.Marshal(map[string]any{"role": "user", "time": map[string]int64{"created": int64(1_700_000_000_000 + i)}})
		part := fmt.Sprintf(`{"text": "pastedlog%02d begins here: `, i) + filler
		if _, err := db.Exec(`INSERT INTO message VALUES(?, 'ses_1', ?, ?)`, id, i, string(data)); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`INSERT INTO part VALUES(?, ?, 'ses_1', ?)`, fmt.Sprintf("prt_%02d", i), id, part); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`PRAGMA journal_mode=WAL`); err != nil { // as opencode keeps it
		t.Fatal(err)
	}
	db.Close()
	pol := writePolicy(t, dir, fmt.Sprintf(`stores:
  - name: oc
    preset: opencode
    paths: [%q]
    settle: 50ms
`, root))
	stateDir := filepath.Join(dir, "state")
	p := startBin(t, memwatchFast, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("ready", 10*time.Second)
	p.waitLog("caught up: every root evaluated, its logs captured and indexed", 120*time.Second)
	found := map[string]string{}
	waitUntil(t, 30*time.Second, func() bool {
		out, _ := exec.Command(memwatchFast, "recall", "--policy", pol, "--state-dir", stateDir, "--all", "--json", "--limit", "50", "begins here").Output()
		var res []struct{ Text, Citation string }
		json.Unmarshal(out, &res)
		for _, r := range res {
			if i := strings.Index(r.Text, "pastedlog"); i >= 0 && len(r.Text) >= i+11 {
				found[r.Text[i:i+11]] = r.Citation
			}
		}
		return len(found) == rows
	})
	rss := peakRSS(t, p.cmd.Process.Pid)
	if err := p.stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d rows of %d MiB: %d recalled by their first words; peak RSS %d MiB", rows, mib, len(found), rss>>20)
	for i := range rows {
		w := fmt.Sprintf("pastedlog%02d", i)
		if c := found[w]; c == "" || !strings.Contains(c, "opencode.db#") {
			t.Errorf("%s: recalled with citation %q", w, c)
		}
	}
	if rss > 256<<20 {
		t.Errorf("peak RSS %d MiB, over 256 MiB", rss>>20)
	}
	said := 0
	p.mu.Lock()
	for _, l := range p.lines {
		if l["msg"] == "an input hit a bound" && l["key"] == "max_line" && l["file"] == "opencode.db" {
			said++
		}
	}
	p.mu.Unlock()
	if said != 1 {
		t.Errorf("the bound was logged %d times, want once", said)
	}
}
