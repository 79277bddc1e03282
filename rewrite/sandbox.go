package rewrite

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ErrOutsideRoot is returned for a path that is, or resolves to, a place outside the store root.
var ErrOutsideRoot = errors.New("path leads outside the store root")

// Resolve returns the real path of p (absolute, or relative to root) after
// following symlinks, and refuses any path that is or leads outside root.
// A path that does not exist yet is resolved through its nearest existing parent.
func Resolve(root, p string) (string, error) {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", fmt.Errorf("resolve store root %s: %w", root, err)
	}
	if !filepath.IsAbs(p) {
		if !filepath.IsLocal(p) {
			return "", fmt.Errorf("resolve %s: %w", p, ErrOutsideRoot)
		}
		p = filepath.Join(root, p)
	}
	p = filepath.Clean(p)
	if !within(filepath.Clean(root), p) && !within(realRoot, p) {
		return "", fmt.Errorf("resolve %s: %w (%s)", p, ErrOutsideRoot, root)
	}
	// Follow symlinks through the longest existing prefix.
	rest := ""
	cur := p
	for {
		real, err := filepath.EvalSymlinks(cur)
		if err == nil {
			real = filepath.Join(real, rest)
			if !within(realRoot, real) {
				return "", fmt.Errorf("resolve %s: %w: it resolves to %s", p, ErrOutsideRoot, real)
			}
			return real, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("resolve %s: %w", p, err)
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return "", fmt.Errorf("resolve %s: %w", p, err)
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

func within(root, p string) bool {
	if p == root {
		return true
	}
	return strings.HasPrefix(p, root+string(os.PathSeparator))
}
