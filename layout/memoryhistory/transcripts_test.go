package memoryhistory

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/memwatch/memwatch/confine"
)

// A transcript database reached through a symlink (to one outside the
// root, say) is not opened: SQLite opens by path.
func TestTranscriptPathsStayInTheRoot(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "agents", "main", "agent"), 0o755)
	os.WriteFile(filepath.Join(dir, "agents", "main", "agent", "db.sqlite"), nil, 0o644)
	os.MkdirAll(filepath.Join(outside, "agent"), 0o755)
	os.WriteFile(filepath.Join(outside, "agent", "db.sqlite"), nil, 0o644)
	os.Symlink(outside, filepath.Join(dir, "agents", "evil"))
	os.Symlink(filepath.Join(outside, "agent", "db.sqlite"), filepath.Join(dir, "agents", "main", "agent", "link.sqlite"))
	root, err := confine.Open(dir, confine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for rel, want := range map[string]bool{
		"agents/main/agent/db.sqlite":   true,
		"agents/evil/agent/db.sqlite":   false,
		"agents/main/agent/link.sqlite": false,
		"agents/main/agent":             false,
	} {
		if got := plainPath(root, rel); got != want {
			t.Errorf("plainPath(%s): got %v, want %v", rel, got, want)
		}
	}
}
