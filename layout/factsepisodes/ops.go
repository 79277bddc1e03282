package factsepisodes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/state"
)

// The seed's memory tools (memory_read, memory_write, memory_append,
// memory_patch) for the CLI and the MCP server. Every path is relative to
// the root and resolved inside it: "..", absolute paths and symlinks that
// lead out are refused (confine), and every change goes through the safe
// rewrite, so it is archived, journaled and undoable.

// Rule names of the tools' changes, as they appear in the journal.
const (
	RuleWrite  = "memory-write"
	RuleAppend = "memory-append"
	RulePatch  = "memory-patch"
)

// Read returns a memory file.
func Read(root *confine.Root, path string) ([]byte, error) {
	return root.ReadFile(path)
}

// ErrNotMemory means a path names something memory tools do not write.
var ErrNotMemory = errors.New("not a memory file")

// checkWritable refuses names the tools must not create: anything but a
// markdown file, hidden files and memwatch's own directory.
func checkWritable(path string) error {
	clean := filepath.ToSlash(filepath.Clean(path))
	if !strings.HasSuffix(clean, ".md") {
		return fmt.Errorf("%s: %w (memory files end in .md)", path, ErrNotMemory)
	}
	for _, part := range strings.Split(clean, "/") {
		if strings.HasPrefix(part, ".") || part == ArchiveDirName {
			return fmt.Errorf("%s: %w (hidden and archive directories are memwatch's)", path, ErrNotMemory)
		}
	}
	return nil
}

// Write creates or overwrites a fact file (facts-episodes' memory_write). An
// overwritten file's old content is archived; undo restores it.
func Write(ctx context.Context, rw *rewrite.Rewriter, root *confine.Root, store, path string, content []byte) (rewrite.Outcome, error) {
	if err := checkWritable(path); err != nil {
		return rewrite.Outcome{}, err
	}
	return rw.Apply(ctx, rewrite.Request{Root: root, Target: path, AllowCreate: true,
		Compute: func(_ context.Context, old []byte) ([]byte, error) {
			if bytes.Equal(old, content) {
				return nil, rewrite.ErrUnchanged
			}
			return content, nil
		}}, &state.Record{Store: store, Rule: RuleWrite})
}

// Append appends an entry (a markdown block) to a memory file, creating it
// if needed, and optionally sets its file-level summary line.
func Append(ctx context.Context, rw *rewrite.Rewriter, root *confine.Root, store, path string, entry []byte, summary string) (rewrite.Outcome, error) {
	if len(bytes.TrimSpace(entry)) == 0 {
		return rewrite.Outcome{}, errors.New("append: the entry is empty")
	}
	if err := checkWritable(path); err != nil {
		return rewrite.Outcome{}, err
	}
	rec := &state.Record{Store: store, Rule: RuleAppend}
	if summary != "" {
		rec.Reason = "summary given: " + summary
	}
	return rw.Apply(ctx, rewrite.Request{Root: root, Target: path, AllowCreate: true,
		Compute: func(_ context.Context, old []byte) ([]byte, error) {
			next := withBlank(append([]byte{}, old...))
			next = append(next, bytes.TrimRight(entry, "\n")...)
			next = append(next, '\n')
			if summary != "" {
				next = Parse(next, true).WithSummary(summary)
			}
			return next, nil
		}}, rec)
}

// Patch is one replacement.
type Patch struct{ Old, New string }

// MaxPatches bounds the patches of one call.
const MaxPatches = 100

// ErrPatch means a patch's old text is absent or ambiguous; nothing was written.
var ErrPatch = errors.New("patch not applied")

// ApplyPatches replaces each patch's old text, which must occur exactly
// once, and returns how many were applied. It writes nothing unless all
// apply. Old text matches across line endings: an LF patch applies to a
// CRLF file, and the file keeps its CRLF endings.
func ApplyPatches(ctx context.Context, rw *rewrite.Rewriter, root *confine.Root, store, path string, patches []Patch) (int, rewrite.Outcome, error) {
	if _, err := root.Rel(path); err != nil {
		return 0, rewrite.Outcome{}, err
	}
	if err := checkWritable(path); err != nil {
		return 0, rewrite.Outcome{}, err
	}
	if len(patches) > MaxPatches {
		return 0, rewrite.Outcome{}, fmt.Errorf("%d patches: %w: at most %d in one call", len(patches), ErrPatch, MaxPatches)
	}
	applied := 0
	out, err := rw.Apply(ctx, rewrite.Request{Root: root, Target: path,
		Compute: func(_ context.Context, old []byte) ([]byte, error) {
			applied = 0
			next := string(old)
			crlf := strings.Contains(next, "\r\n")
			for i, p := range patches {
				if p.Old == "" {
					return nil, fmt.Errorf("patch %d: %w: the old text is empty", i+1, ErrPatch)
				}
				o, n := p.Old, p.New
				if crlf && strings.Count(next, o) == 0 {
					o, n = toCRLF(o), toCRLF(n)
				}
				switch c := strings.Count(next, o); c {
				case 0:
					return nil, fmt.Errorf("patch %d: %w: old text not found", i+1, ErrPatch)
				case 1:
				default:
					return nil, fmt.Errorf("patch %d: %w: old text is ambiguous (%d occurrences); include more context", i+1, ErrPatch, c)
				}
				next = strings.Replace(next, o, n, 1)
				applied++
			}
			return []byte(next), nil
		}}, &state.Record{Store: store, Rule: RulePatch})
	if err != nil {
		return 0, out, err
	}
	return applied, out, nil
}

// toCRLF turns bare LF line endings into CRLF.
func toCRLF(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\n", "\r\n")
}
