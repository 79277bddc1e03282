package control

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestPolicyStamp: the stamp of a policy file or directory is the same
// however its path is spelled, and changes with any edit, rename or new
// file a policy load would read (and with nothing else).
func TestPolicyStamp(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.yaml")
	os.WriteFile(file, []byte("version: 1\n"), 0o644)
	wd, _ := os.Getwd()
	t.Cleanup(func() { os.Chdir(wd) })
	os.Chdir(dir)
	if a, b := PolicyStamp(file), PolicyStamp("policy.yaml"); a == "" || a != b {
		t.Errorf("one file, two spellings: %q and %q", a, b)
	}
	before := PolicyStamp(file)
	os.WriteFile(file, []byte("version: 1\nstores: []\n"), 0o644)
	if PolicyStamp(file) == before {
		t.Error("an edit left the file's stamp as it was")
	}

	pd := filepath.Join(dir, "policy.d")
	os.Mkdir(pd, 0o755)
	os.WriteFile(filepath.Join(pd, "a.yaml"), []byte("version: 1\n"), 0o644)
	s1 := PolicyStamp(pd)
	os.WriteFile(filepath.Join(pd, "notes.txt"), []byte("not read"), 0o644)
	os.WriteFile(filepath.Join(pd, ".a.yaml.swp"), []byte("an editor's"), 0o644)
	if s2 := PolicyStamp(pd); s2 != s1 {
		t.Error("a file a policy load does not read changed the directory's stamp")
	}
	os.WriteFile(filepath.Join(pd, "b.yml"), []byte("version: 1\n"), 0o644)
	s3 := PolicyStamp(pd)
	if s3 == s1 {
		t.Error("a new policy file left the directory's stamp as it was")
	}
	later := time.Now().Add(time.Minute)
	os.Chtimes(filepath.Join(pd, "a.yaml"), later, later)
	if PolicyStamp(pd) == s3 {
		t.Error("a policy file touched left the directory's stamp as it was")
	}
	if PolicyStamp(filepath.Join(dir, "none")) != "" {
		t.Error("no policy has a stamp")
	}
}
