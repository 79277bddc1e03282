package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/layout/registry"
	"github.com/memwatch/memwatch/policy"
)

// agentFind is what init looks for of one preset under a home directory.
type agentFind struct {
	preset string
	// root is the preset's root glob under the home directory.
	root string
	// sessions are globs (relative to a root) of the agent's session logs,
	// and memory of its memory files, for the counts init prints;
	// exclude is a glob of the names among them that are none (the
	// preset's sessions_exclude).
	sessions, memory []string
	exclude          string
	// listed, when set, returns roots the agent itself lists (Crush's
	// projects), wherever they are: init names each in the policy.
	listed func(home string) ([]string, error)
}

var agentFinds = []agentFind{
	{preset: "claude-code", root: ".claude/projects/*", sessions: []string{"*.jsonl"}, memory: []string{"memory/*.md"}},
	{preset: "codex", root: ".codex", sessions: []string{"sessions/*/*/*/rollout-*.jsonl"}},
	{preset: "nanobot", root: ".nanobot", sessions: []string{"workspace/sessions/*.jsonl", "sessions/*.jsonl"}, memory: []string{"workspace/memory/*.md", "workspace/memory/history.jsonl"}},
	{preset: "openclaw", root: ".openclaw", sessions: []string{"agents/*/sessions/*.jsonl", "agents/*/agent/openclaw-agent.sqlite"}, exclude: "*.trajectory.jsonl", memory: []string{"workspace/MEMORY.md", "workspace/memory/*.md"}},
	{preset: "gemini-cli", root: ".gemini", sessions: []string{"tmp/*/chats/session-*.jsonl"}, memory: []string{"GEMINI.md"}},
	{preset: "qwen-code", root: ".qwen/projects/*", sessions: []string{"chats/*.jsonl"}, memory: []string{"memory/*.md"}},
	{preset: "opencode", root: ".local/share/opencode", sessions: []string{"opencode.db"}},
	{preset: "kilo-code", root: ".local/share/kilo", sessions: []string{"kilo.db"}},
	{preset: "continue-cli", root: ".continue", sessions: []string{"sessions/*-*.json"}},
	{preset: "copilot-cli", root: ".copilot", sessions: []string{"session-state/*/events.jsonl"}},
	{preset: "crush", root: "*/.crush", sessions: []string{"crush.db"}, listed: crushProjects},
	{preset: "pi", root: ".pi/agent", sessions: []string{"sessions/*/*.jsonl"}},
	{preset: "cline", root: ".cline", sessions: []string{"data/sessions/*/*.messages.json"}},
	{preset: "droid", root: ".factory", sessions: []string{"sessions/*/*.jsonl"}},
}

// maxAgentFile bounds an agent's own file init reads (a projects.json has
// no business being larger).
const maxAgentFile = 4 << 20

// maxListedRoots bounds the roots one agent's file may list.
const maxListedRoots = 10_000

// crushProjects are the data directories of the projects Crush has run in,
// from its ~/.local/share/crush/projects.json: the user's file, read as
// the user (confine.ReadAgentFile: no link followed, no FIFO or device,
// at most maxAgentFile). No file is no projects.
func crushProjects(home string) ([]string, error) {
	rel := filepath.Join(".local", "share", "crush", "projects.json")
	b, err := confine.ReadAgentFile(home, rel, maxAgentFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s not read: %w", filepath.Join(home, rel), err)
	}
	var list struct {
		Projects []struct {
			DataDir string `json:"data_dir"`
		} `json:"projects"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("%s not read: %w", filepath.Join(home, rel), err)
	}
	var out []string
	for _, p := range list.Projects {
		if len(out) == maxListedRoots {
			return out, fmt.Errorf("%s lists more than %d projects: the rest are left out", filepath.Join(home, rel), maxListedRoots)
		}
		if filepath.IsAbs(p.DataDir) {
			out = append(out, filepath.Clean(p.DataDir))
		}
	}
	return out, nil
}

// found is one agent init found data of.
type found struct {
	agentFind
	glob                  string   // the root glob, absolute
	paths                 []string // the globs to write: glob, then roots listed elsewhere
	roots, logs, memFiles int
	logBytes, memoryBytes int64
}

func initCmd(g *globals) *cobra.Command {
	var home, write string
	var force bool
	cmd := &cobra.Command{
		Use:   "init [--home DIR] [--write [FILE]]",
		Short: "Find the agents you run and print the policy that maintains their memory",
		Long: `Look under the home directory for the data of the agents memwatch knows
(Claude Code, Codex, Gemini CLI, Qwen Code, nanobot, OpenClaw, opencode,
Kilo Code CLI, GitHub Copilot CLI, Continue CLI, Pi, Cline CLI, Factory Droid,
Crush: the projects Crush lists in ~/.local/share/crush/projects.json) and
print a policy with one store
per agent found, using its preset, with how many sessions and memory files
each has. --write writes the policy where every command looks for it
(--policy or $MEMWATCH_POLICY when given, else ~/.config/memwatch/policy.yaml,
or as root /etc/memwatch/policy.d/memwatch.yaml; --write=FILE elsewhere),
refusing to overwrite one unless --force; then memwatch run (or memwatch
install --user, as a service) keeps that memory, and memwatch recall (or
memwatch mcp) searches all of your past sessions. memwatch validate
--expand shows every key a preset stands for.

When the machine's memwatch service already maintains some of the roots
found, init says so: that service serves you (recall, mcp, undo) and a
daemon of your own would rewrite the same files.`,
		Example: `  memwatch init                # print the policy for the agents found in your home
  memwatch init --write        # write it where every command looks for it`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case write == defaultWrite && len(args) == 1:
				write = args[0] // --write FILE
			case len(args) == 1:
				return cli.UsageError{Err: fmt.Errorf("unexpected argument %q (the file goes with --write)", args[0])}
			case write == defaultWrite:
				write = initPolicyPath()
				if p, named, _ := g.PolicyRule(); named {
					write = p // where every command looks: the flag's or $MEMWATCH_POLICY's
					if fi, err := os.Stat(p); err == nil && fi.IsDir() {
						write = filepath.Join(p, "memwatch.yaml")
					}
				}
			}
			if home == "" {
				h, err := os.UserHomeDir()
				if err != nil {
					return cli.UsageError{Err: errors.New("no home directory: give --home DIR")}
				}
				home = h
			}
			fi, err := os.Stat(home)
			if err != nil || !fi.IsDir() {
				return cli.UsageError{Err: fmt.Errorf("--home %s: not a directory", home)}
			}
			var finds []found
			for _, a := range agentFinds {
				if f, ok := findAgent(home, a, g.Stderr); ok {
					finds = append(finds, f)
				}
			}
			text := initPolicy(home, finds)
			if _, err := policy.Parse("memwatch init", []byte(text), registry.Specs()); err != nil {
				return fmt.Errorf("init built a policy that does not load (a bug): %w", err)
			}
			for _, f := range finds {
				fmt.Fprintf(g.Stderr, "found %s: %d root(s), %d session log(s) (%s), %d memory file(s) (%s)\n",
					policy.Presets[f.preset].Agent, f.roots, f.logs, g.Size(int64(f.logBytes)), f.memFiles, g.Size(int64(f.memoryBytes)))
			}
			if len(finds) == 0 {
				fmt.Fprintf(g.Stderr, "found no agent data under %s (looked for %s)\n", home, knownAgents())
			}
			if os.Geteuid() != 0 {
				sayServiceKeeps(cmd.Context(), g.Stderr, home, control.SystemSocket)
			}
			if write == "" {
				fmt.Fprint(g.Stdout, text)
				return nil
			}
			if _, err := os.Stat(write); err == nil && !force {
				return cli.UsageError{Err: fmt.Errorf("--write %s: the file exists; give --force to replace it", write)}
			}
			if err := os.MkdirAll(filepath.Dir(write), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(write, []byte(text), 0o644); err != nil {
				return err
			}
			next := "memwatch run (in the foreground), or memwatch install --user (as your service)"
			if os.Geteuid() == 0 {
				next = "memwatch run (in the foreground), or memwatch install (as the system service)"
			}
			if p, _, _ := g.PolicyRule(); control.PolicyID(p) != control.PolicyID(write) {
				next = fmt.Sprintf("memwatch run --policy %s (every command takes --policy %s, or set MEMWATCH_POLICY)", write, write)
			}
			fmt.Fprintf(g.Stdout, "wrote %s; next: %s\n", write, next)
			return nil
		},
	}
	cmd.Flags().StringVar(&home, "home", "", "the home directory to look in (default: yours)")
	cmd.Flags().StringVar(&write, "write", "", "write the policy where memwatch looks for it (or to `FILE`, as --write=FILE) instead of printing it")
	cmd.Flags().Lookup("write").NoOptDefVal = defaultWrite
	cmd.Flags().BoolVar(&force, "force", false, "with --write, replace an existing file")
	return cmd
}

// sayServiceKeeps says when the machine's memwatch service (root's)
// already maintains roots under home: a daemon of the user's own would
// rewrite the same files, and the service serves the user already. It
// answers a user about that user's roots only.
func sayServiceKeeps(ctx context.Context, w io.Writer, home, socket string) {
	if fi, err := os.Stat(socket); err != nil || fi.Mode()&os.ModeSocket == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	st, err := control.NewClient(socket).Status(ctx)
	if err != nil {
		return
	}
	var under []string
	for _, s := range st.Stores {
		for _, r := range s.Roots {
			if rel, err := filepath.Rel(home, r); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
				under = append(under, r)
			}
		}
	}
	if len(under) == 0 {
		return
	}
	sort.Strings(under)
	fmt.Fprintf(w, "note: the machine's memwatch service already maintains %d root(s) here (%s): it serves you (memwatch recall, memwatch mcp, undo); run no daemon of your own for them, or leave them out of this policy\n",
		len(under), strings.Join(under[:min(len(under), 3)], ", "))
}

// defaultWrite is --write given with no file: "where memwatch looks", as
// --help shows it (--write=FILE names a file).
const defaultWrite = "where memwatch looks"

func knownAgents() string {
	var names []string
	for _, a := range agentFinds {
		names = append(names, policy.Presets[a.preset].Agent)
	}
	return strings.Join(names, ", ")
}

// findAgent counts an agent's roots, session logs and memory files under
// home; ok is false when it has none. Roots are found as the daemon finds
// them (no symbolic link followed below home). A root the agent's own
// files list elsewhere (Crush's projects) is named only when it belongs to
// the home's owner and is reached without a symbolic link; the others are
// left out, and why is said on stderr.
func findAgent(home string, a agentFind, stderr io.Writer) (found, bool) {
	f := found{agentFind: a, glob: filepath.Join(home, a.root)}
	f.paths = []string{f.glob}
	var roots []string
	ids, _ := confine.GlobRoots(f.glob, false)
	for _, id := range ids {
		roots = append(roots, id.Path)
	}
	globbed := len(roots)
	if a.listed != nil {
		owner := -1
		if fi, err := os.Stat(home); err == nil {
			owner = int(fi.Sys().(*syscall.Stat_t).Uid)
		}
		listed, err := a.listed(home)
		if err != nil {
			fmt.Fprintf(stderr, "left out the roots %s's own files list: %v\n", policy.Presets[a.preset].Agent, err)
		}
		for _, r := range listed {
			if ok, _ := filepath.Match(f.glob, r); ok || slices.Contains(roots, r) {
				continue
			}
			if why := listedRootRefused(home, owner, r); why != "" {
				fmt.Fprintf(stderr, "left out %s (listed by %s's own files): %s\n", r, policy.Presets[a.preset].Agent, why)
				continue
			}
			roots = append(roots, r)
		}
	}
	for i, r := range roots {
		count := func(globs []string, n *int, size *int64) {
			for _, g := range globs {
				ms, _ := filepath.Glob(filepath.Join(globEscape(r), g))
				for _, m := range ms {
					if a.exclude != "" {
						if skip, _ := filepath.Match(a.exclude, filepath.Base(m)); skip {
							continue
						}
					}
					if fi, err := os.Lstat(m); err == nil && fi.Mode().IsRegular() {
						*n++
						*size += fi.Size()
					}
				}
			}
		}
		logs, mem := f.logs, f.memFiles
		count(a.sessions, &f.logs, &f.logBytes)
		count(a.memory, &f.memFiles, &f.memoryBytes)
		if f.logs > logs || f.memFiles > mem {
			f.roots++
			if i >= globbed {
				// A root with pattern characters in its name stands for
				// itself only when they are escaped.
				f.paths = append(f.paths, globEscape(r))
			}
		}
	}
	return f, f.roots > 0
}

// listedRootRefused says why a root an agent's file lists is not named in
// the policy ("" when it is): the file is the agent's to write, so it may
// point anywhere, another user's tree or a root-only directory included.
// memwatch names it only when it is a real directory reached without a
// symbolic link (from home when inside it, else from /) and owned by the
// home's owner.
func listedRootRefused(home string, owner int, r string) string {
	if !filepath.IsAbs(r) {
		return "not an absolute path"
	}
	from := []string{"/"}
	if confine.Within(filepath.Clean(home), r) {
		from = []string{filepath.Clean(home)}
	}
	id, err := confine.Stat(r, from)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "it does not exist"
	case err != nil:
		return err.Error()
	case id.UID != owner:
		return fmt.Sprintf("it belongs to uid %d, not to the owner of %s (uid %d)", id.UID, home, owner)
	}
	return ""
}

// globEscape makes a path a glob that matches only it.
func globEscape(p string) string {
	var b strings.Builder
	for _, r := range p {
		if strings.ContainsRune(`*?[\\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// initPolicy is the policy for what was found, with the counts as comments.
func initPolicy(home string, finds []found) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# memwatch policy written by memwatch init for %s.\n", home)
	b.WriteString("# memwatch validate --expand --policy FILE shows every key a preset stands for;\n# any of them can be set here to override it.\nversion: 1\n")
	if len(finds) == 0 {
		b.WriteString("# No agent data was found; add a store (see docs/policy.md) and reload.\nstores: []\n")
		return b.String()
	}
	b.WriteString("stores:\n")
	for _, f := range finds {
		p := policy.Presets[f.preset]
		fmt.Fprintf(&b, "  # %s: %d root(s), %d session log(s), %s; %d memory file(s).\n", p.Agent, f.roots, f.logs, policy.Human(f.logBytes), f.memFiles)
		fmt.Fprintf(&b, "  # %s.\n", p.About)
		var paths []string
		for _, p := range f.paths {
			paths = append(paths, strconv.Quote(p))
		}
		fmt.Fprintf(&b, "  - name: %s\n    preset: %s\n    paths: [%s]\n", f.preset, f.preset, strings.Join(paths, ", "))
	}
	return b.String()
}
