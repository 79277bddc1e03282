package factsepisodes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/state"
)

// The seed's memory tools (memory_read, memory_append, memory_patch) for
// scripts and the MCP server: every path is resolved inside the root, and
// "..", absolute paths and symlinks leading out are refused.

// Read returns a memory file.
func Read(root, path string) ([]byte, error) {
	p, err := rewrite.Resolve(root, path)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(p)
}

// Append appends an entry (a markdown block) to a memory file, creating it
// if needed, and optionally sets its file-level summary line.
func Append(ctx context.Context, rw *rewrite.Rewriter, root, path string, entry []byte, summary string) error {
	if len(bytes.TrimSpace(entry)) == 0 {
		return errors.New("append: the entry is empty")
	}
	_, err := rw.Apply(ctx, rewrite.Request{Root: root, Target: path, AllowCreate: true, AppendOnly: true,
		Compute: func(_ context.Context, old []byte) ([]byte, error) {
			next := withBlank(append([]byte{}, old...))
			next = append(next, bytes.TrimRight(entry, "\n")...)
			next = append(next, '\n')
			if summary != "" {
				next = Parse(next, true).WithSummary(summary)
			}
			return next, nil
		}}, &state.Record{Rule: "memory-append"})
	return err
}

// Patch is one replacement.
type Patch struct{ Old, New string }

// ErrPatch means a patch's old text is absent or ambiguous; nothing was written.
var ErrPatch = errors.New("patch not applied")

// ApplyPatches replaces each patch's old text, which must occur exactly
// once, and returns how many were applied. It writes nothing unless all apply.
func ApplyPatches(ctx context.Context, rw *rewrite.Rewriter, root, path string, patches []Patch) (int, error) {
	applied := 0
	_, err := rw.Apply(ctx, rewrite.Request{Root: root, Target: path,
		Compute: func(_ context.Context, old []byte) ([]byte, error) {
			applied = 0
			next := string(old)
			for i, p := range patches {
				if p.Old == "" {
					return nil, fmt.Errorf("patch %d: %w: the old text is empty", i+1, ErrPatch)
				}
				switch n := countOf(next, p.Old); n {
				case 0:
					return nil, fmt.Errorf("patch %d: %w: old text not found", i+1, ErrPatch)
				case 1:
				default:
					return nil, fmt.Errorf("patch %d: %w: old text is ambiguous (%d occurrences); include more context", i+1, ErrPatch, n)
				}
				next = replaceOnce(next, p.Old, p.New)
				applied++
			}
			return []byte(next), nil
		}}, &state.Record{Rule: "memory-patch"})
	if err != nil {
		return 0, err
	}
	return applied, nil
}

func countOf(s, sub string) int { return bytes.Count([]byte(s), []byte(sub)) }

func replaceOnce(s, old, new string) string {
	i := bytes.Index([]byte(s), []byte(old))
	return s[:i] + new + s[i+len(old):]
}
