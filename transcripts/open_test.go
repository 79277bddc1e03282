package transcripts

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/memwatch/memwatch/confine"
)

// TestOpenTakesThePathAsAName: a directory named q?x= in a root holds a
// database; Open reads that one, not the file q the unescaped URI would
// name (with parameters of the agent's choosing), and refuses a path
// that SQLite resolves elsewhere (a link on the way).
func TestOpenTakesThePathAsAName(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	mk := func(path, table string) {
		os.MkdirAll(filepath.Dir(path), 0o755)
		db, err := sql.Open("sqlite", confine.SQLiteURI(filepath.Join(filepath.Dir(path), "tmp.db"), ""))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec("CREATE TABLE " + table + "(x)"); err != nil {
			t.Fatal(err)
		}
		db.Close()
		os.Rename(filepath.Join(filepath.Dir(path), "tmp.db"), path)
	}
	inside := filepath.Join(dir, "q?x=", "agent.db")
	mk(inside, "inside")
	mk(filepath.Join(dir, "q"), "decoy")
	db, err := Open(ctx, inside)
	if err != nil {
		t.Fatal(err)
	}
	var name string
	if err := db.QueryRow(`SELECT name FROM sqlite_master WHERE type='table'`).Scan(&name); err != nil || name != "inside" {
		t.Errorf("read table %q (%v), want the database in q?x=", name, err)
	}
	if _, err := db.Exec("CREATE TABLE w(x)"); err == nil {
		t.Error("the database opened writable")
	}
	db.Close()
	os.Symlink(filepath.Join(dir, "q?x="), filepath.Join(dir, "link"))
	if db, err := Open(ctx, filepath.Join(dir, "link", "agent.db")); !errors.Is(err, confine.ErrOutside) {
		if db != nil {
			db.Close()
		}
		t.Errorf("a path SQLite resolves elsewhere: %v, want ErrOutside", err)
	}
}
