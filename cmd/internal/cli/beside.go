package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Beside finds the binary name beside this one, and only there: the
// service runs as root, and a PATH lookup could run a binary another user
// put in a directory of theirs.
func Beside(name string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find %s: %w", name, err)
	}
	p := filepath.Join(filepath.Dir(self), name)
	if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("find %s: there is none beside this binary (%s)", name, p)
	}
	return p, nil
}

// Become runs the binary at path with args in this process (exec: its
// arguments, its standard files and signals); it returns only when it
// cannot.
func Become(path string, args []string) int {
	err := syscall.Exec(path, append([]string{path}, args...), os.Environ())
	fmt.Fprintf(os.Stderr, "memwatch: run %s: %v\n", path, err)
	return ExitFailure
}
