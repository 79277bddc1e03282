// Package scope decides which of a policy's roots a request from a
// directory means, so that recall, show and the MCP tools work where
// people and agents stand, with no path to type:
//
//   - a directory inside a root (or the root itself): that root;
//   - an agent project's working directory (where Claude Code, Codex and
//     the others start, and start their MCP servers): that project's roots
//     and files, found the way each agent files them (Claude Code's
//     ~/.claude/projects/<the directory, / as ->, Pi's
//     sessions/--<directory>--/, Gemini CLI's tmp/<sha256 of it>/, Codex's
//     rollouts whose session_meta names it as their cwd, a project's own
//     .crush, opencode's and Kilo Code's conversations whose row in their
//     database names it as their directory, ...);
//   - anywhere else: every root (the caller then keeps those it reaches).
//
// It reads only names, for Codex the first line of each rollout, and
// for a database of transcripts its sessions' directories, of roots it
// is given, opened by the caller as the roots' owner.
package scope

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/layout/registry"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/recall"
	"github.com/memwatch/memwatch/spool"
	"github.com/memwatch/memwatch/transcripts"
)

// Candidate is a root of the policy, as its store knows it.
type Candidate struct {
	Store *policy.Store
	ID    confine.ID
}

// Root is a root a request covers.
type Root struct {
	Candidate
	// Files, when not nil, are the root's only files that are the
	// project's (relative to the root): the root holds several projects'
	// sessions (Codex's ~/.codex, Gemini CLI's ~/.gemini).
	Files []string
	// Records, when not nil, are the root's only conversations of a
	// database that are the project's (spool.RecordLog: DB#ID): those
	// that ran in it (opencode's ~/.local/share/opencode/opencode.db).
	Records []string
	// Why says how it belongs to the project ("" for a root the directory
	// is in, or every root).
	Why string
}

// Kinds of scope.
const (
	InRoot  = "root"    // the directory is in a root
	Project = "project" // the directory is an agent project's working directory
	All     = "all"     // neither: every root
)

// Scope is what a request from Dir covers.
type Scope struct {
	Kind  string
	Dir   string
	Roots []Root
}

// String says what a scope covers, for a line on stderr.
func (s Scope) String() string {
	switch s.Kind {
	case InRoot:
		return fmt.Sprintf("the root %s (store %s)", s.Roots[0].ID.Path, s.Roots[0].Store.Name)
	case Project:
		var parts []string
		for _, r := range s.Roots {
			p := r.ID.Path
			switch {
			case r.Records != nil && len(r.Files) == 0:
				p = fmt.Sprintf("%d conversation(s) of %s", len(r.Records), r.ID.Path)
			case r.Records != nil:
				p = fmt.Sprintf("%d file(s) and %d conversation(s) of %s", len(r.Files), len(r.Records), r.ID.Path)
			case r.Files != nil:
				p = fmt.Sprintf("%d file(s) of %s", len(r.Files), r.ID.Path)
			}
			parts = append(parts, fmt.Sprintf("%s (%s)", p, r.Store.Name))
		}
		return fmt.Sprintf("the memory of project %s: %s", s.Dir, strings.Join(parts, ", "))
	}
	return fmt.Sprintf("every root (%s is in no root and is no agent project's directory)", s.Dir)
}

// Opener opens a candidate root as its owner, to read the names (and
// Codex's first lines) that tell which of its files are a project's.
type Opener func(Candidate) (*confine.Root, error)

// maxProjectFiles bounds the files of a shared root looked at to find a
// project's.
const maxProjectFiles = 100_000

// Of is the scope of a request from dir (absolute, clean) over cands.
func Of(cands []Candidate, dir string, open Opener, cache *Cache) Scope {
	dir = filepath.Clean(dir)
	// The root dir is in: the deepest.
	var in *Candidate
	for i, c := range cands {
		if confine.Within(c.ID.Path, dir) && (in == nil || len(c.ID.Path) > len(in.ID.Path)) {
			in = &cands[i]
		}
	}
	if in != nil {
		return Scope{Kind: InRoot, Dir: dir, Roots: []Root{{Candidate: *in}}}
	}
	// The project dir is in, at any depth, as git finds its repository:
	// the deepest of dir and the directories above it that an agent's
	// project is named after (or ran in).
	var anc []string
	encs := map[string]string{} // an encoded name: the directory it names
	whys := map[string]string{}
	for d := dir; ; d = filepath.Dir(d) {
		anc = append(anc, d)
		for name, why := range Encodings(d) {
			if _, ok := encs[name]; !ok {
				encs[name], whys[name] = d, why
			}
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	depth := map[string]int{}
	for i, d := range anc {
		depth[d] = i
	}
	found := map[string][]Root{}
	for _, c := range cands {
		base := filepath.Base(c.ID.Path)
		switch parent := filepath.Dir(c.ID.Path); {
		case inProjects(c.Store) && depth[parent] > 0 || inProjects(c.Store) && parent == dir:
			// The project's own agent directory (dir/.crush).
			found[parent] = append(found[parent], Root{Candidate: c, Why: "inside the project"})
		case encs[base] != "":
			found[encs[base]] = append(found[encs[base]], Root{Candidate: c, Why: whys[base]})
		default:
			files := cache.projectFiles(c, anc, open)
			for d, r := range cache.projectRecords(c, anc, open) {
				if files == nil {
					files = map[string]Root{}
				}
				if f, ok := files[d]; ok {
					r.Files, r.Why = f.Files, f.Why+", "+r.Why
				}
				files[d] = r
			}
			for d, r := range files {
				found[d] = append(found[d], r)
			}
		}
	}
	for _, d := range anc {
		if len(found[d]) > 0 {
			return Scope{Kind: Project, Dir: d, Roots: found[d]}
		}
	}
	s := Scope{Kind: All, Dir: dir}
	for _, c := range cands {
		s.Roots = append(s.Roots, Root{Candidate: c})
	}
	return s
}

// inProjects reports whether a store's roots are directories inside
// projects: a glob whose last name is fixed under a wildcard (Crush's
// ~/*/.crush), so a root's parent is a project.
func inProjects(s *policy.Store) bool {
	for _, g := range s.Paths {
		if !strings.ContainsAny(filepath.Base(g), "*?[") && strings.ContainsAny(filepath.Base(filepath.Dir(g)), "*?[") {
			return true
		}
	}
	return false
}

// nonAlnum is what Claude Code writes as - in a project's directory name.
var nonAlnum = regexp.MustCompile(`[^A-Za-z0-9]`)

// Encodings are the names agents give a directory named after project
// dir, each with the agent that names it so.
func Encodings(dir string) map[string]string {
	dash := nonAlnum.ReplaceAllString(dir, "-")
	sum := sha256.Sum256([]byte(dir))
	return map[string]string{
		dash: "named after the project (Claude Code, Qwen Code)",
		"--" + strings.Trim(strings.ReplaceAll(dir, "/", "-"), "-") + "--": "named after the project (Pi, session-detail)",
		hex.EncodeToString(sum[:]): "named by the project's hash (Gemini CLI)",
	}
}

// projectFiles lists the session files of a shared root that are the
// project of one of dirs (dir and the directories above it, deepest
// first), by the directory whose project they are: those under a
// directory named after it, or, for a log that names its working
// directory in its first line (Codex's session_meta, Claude Code's cwd),
// those that name it.
func (cache *Cache) projectFiles(c Candidate, dirs []string, open Opener) map[string]Root {
	var globs []string
	for _, g := range registry.LogGlobs(c.Store) {
		// A root of one project's logs (Claude Code's *.jsonl) is matched
		// by its name; only roots that keep many projects' sessions in
		// directories are looked into.
		if strings.Contains(g, "/") {
			globs = append(globs, g)
		}
	}
	if len(globs) == 0 || open == nil {
		return nil
	}
	root, err := open(c)
	if err != nil {
		return nil
	}
	defer root.Close()
	encs := map[string]string{}
	whys := map[string]string{}
	isDir := map[string]bool{}
	for i := len(dirs) - 1; i >= 0; i-- { // the deeper's names win
		for name, why := range Encodings(dirs[i]) {
			encs[name], whys[name] = dirs[i], why
		}
		isDir[dirs[i]] = true
	}
	out := map[string]Root{}
	add := func(d, rel, why string) {
		r := out[d]
		r.Candidate, r.Why = c, why
		r.Files = append(r.Files, rel)
		out[d] = r
	}
	seen := 0
	for _, glob := range globs {
		sc, err := root.GlobScan(glob, "")
		if err != nil {
			continue
		}
		for seen < maxProjectFiles {
			rels, done := sc.Next(256)
			seen += len(rels)
			for _, rel := range rels {
				if d, why := underNamed(rel, encs, whys); d != "" {
					add(d, rel, why)
					continue
				}
				if cwd := cache.cwdOf(root, rel); isDir[cwd] {
					add(cwd, rel, "sessions that ran in the project")
				}
			}
			if done {
				break
			}
		}
		sc.Close()
	}
	for d, r := range out {
		sort.Strings(r.Files)
		out[d] = r
	}
	return out
}

// projectRecords lists the conversations of a root's transcript
// databases (its store's sources of records) that ran in one of dirs,
// by that directory, each root with no file of its own (Files empty):
// the database is the only place the agent keeps which project a
// conversation was of. The database is read as the root's owner, the
// way the layout reads it.
func (cache *Cache) projectRecords(c Candidate, dirs []string, open Opener) map[string]Root {
	srcs, _ := registry.SearchSources(c.Store)
	var globs []string
	for _, src := range srcs {
		if src.Kind == recall.Records && strings.HasSuffix(src.Glob, ".db") {
			globs = append(globs, src.Glob)
		}
	}
	if len(globs) == 0 || open == nil {
		return nil
	}
	root, err := open(c)
	if err != nil {
		return nil
	}
	defer root.Close()
	out := map[string]Root{}
	for _, glob := range globs {
		sc, err := root.GlobScan(glob, "")
		if err != nil {
			continue
		}
		rels, _ := sc.Next(16)
		sc.Close()
		for _, rel := range rels {
			for d, ids := range cache.sessionsIn(root, rel, dirs) {
				r := out[d]
				r.Candidate, r.Why = c, "conversations that ran in the project"
				if r.Files == nil {
					r.Files = []string{}
				}
				for _, id := range ids {
					r.Records = append(r.Records, spool.RecordLog(rel, id))
				}
				out[d] = r
			}
		}
	}
	return out
}

// sessionsIn is transcripts.ProjectSessions of the database rel of root,
// read as its owner, remembered while the database and its log keep
// their size and time (a conversation started since is in it).
func (c *Cache) sessionsIn(root *confine.Root, rel string, dirs []string) map[string][]string {
	var stamp strings.Builder
	for _, f := range []string{rel, rel + "-wal"} {
		if fi, err := root.Stat(f); err == nil {
			fmt.Fprintf(&stamp, "%d:%d;", fi.Size(), fi.ModTime().UnixNano())
		}
	}
	key := root.ID().Key() + "\x00" + rel + "\x00" + stamp.String() + "\x00" + strings.Join(dirs, "\x00")
	if c != nil {
		c.mu.Lock()
		m, ok := c.sessions[key]
		c.mu.Unlock()
		if ok {
			return m
		}
	}
	var m map[string][]string
	err := root.Do(func() error {
		path, err := root.RealPath(rel)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		m, err = transcripts.ProjectSessions(ctx, path, dirs)
		return err
	})
	if c != nil && err == nil { // a database busy or cut short is read again
		c.mu.Lock()
		if c.sessions == nil || len(c.sessions) >= maxSessionSets {
			c.sessions = map[string]map[string][]string{}
		}
		c.sessions[key] = m
		c.mu.Unlock()
	}
	return m
}

// maxSessionSets bounds the answers of sessionsIn a Cache remembers.
const maxSessionSets = 256

// underNamed is the directory rel is filed under by name (encs: an
// encoded name to the directory it names), and why ("": none).
func underNamed(rel string, encs, whys map[string]string) (string, string) {
	for d := path.Dir(filepath.ToSlash(rel)); d != "." && d != "/"; d = path.Dir(d) {
		if dir := encs[path.Base(d)]; dir != "" {
			return dir, whys[path.Base(d)]
		}
	}
	return "", ""
}

// cwdRE finds the working directory a log's first line names: Codex's
// session_meta payload.cwd, a cwd field of Claude Code's and others'
// lines. A regular expression over the line's first bytes, not a JSON
// decode: the line goes on with the agent's instructions, kilobytes long.
var cwdRE = regexp.MustCompile(`"cwd"\s*:\s*"((?:[^"\\]|\\.)*)"`)

// cwdOf is the working directory a log's first line names, "" when none.
func (c *Cache) cwdOf(root *confine.Root, rel string) string {
	key := root.ID().Key() + "\x00" + rel
	if cwd, ok := c.get(key); ok {
		return cwd
	}
	cwd := ""
	if f, _, err := root.OpenRead(rel); err == nil {
		head := make([]byte, 4<<10)
		n, _ := io.ReadFull(f, head)
		f.Close()
		line, _, _ := bytes.Cut(head[:n], []byte{'\n'})
		if m := cwdRE.FindSubmatch(line); m != nil {
			var s string
			if json.Unmarshal(append(append([]byte{'"'}, m[1]...), '"'), &s) == nil && filepath.IsAbs(s) {
				cwd = filepath.Clean(s)
			}
		}
	}
	c.put(key, cwd)
	return cwd
}

// Cache remembers the working directory each log names (its first line
// does not change), so a daemon asked many times reads each once. Safe
// for concurrent use; a nil Cache remembers nothing.
type Cache struct {
	mu       sync.Mutex
	m        map[string]string
	names    map[string]named               // Name's answers, by root
	sessions map[string]map[string][]string // sessionsIn's, by database, stamp and directories
}

// named is a root's Name and when it was found.
type named struct {
	name string
	at   time.Time
}

// nameFor is how long a Cache gives a root's Name again: a label, found
// by looking up the directories the root's name encodes (as its owner,
// with up to a stat a level), which a search gave each root with a
// result, each time.
const nameFor = time.Minute

// maxCached bounds the logs a Cache remembers.
const maxCached = 200_000

func (c *Cache) get(key string) (string, bool) {
	if c == nil {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[key]
	return v, ok
}

func (c *Cache) put(key, cwd string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCached {
		c.m = map[string]string{}
	}
	c.m[key] = cwd
}

// Name is the package's Name of root, found again once nameFor has
// passed; a nil Cache finds it each time.
func (c *Cache) Name(root string) string {
	if c == nil {
		return Name(root)
	}
	now := time.Now()
	c.mu.Lock()
	e, ok := c.names[root]
	c.mu.Unlock()
	if ok && now.Sub(e.at) < nameFor && now.Sub(e.at) >= 0 {
		return e.name
	}
	n := Name(root)
	c.mu.Lock()
	if c.names == nil || len(c.names) >= maxCached {
		c.names = map[string]named{}
	}
	c.names[root] = named{n, now}
	c.mu.Unlock()
	return n
}

// Name is the short name a root goes by in results: the name of the
// project directory a Claude Code-style root is named after, found by
// reading back the directories its name encodes (-home-alice-src-my-app is
// /home/alice/src/my-app when that exists: my-app), else
// recall.ProjectName's.
//
// The directories are looked up as the root's owner (confine.AsOwnerOf):
// a root named after a path only another user may see gets its raw name,
// as one named after a path that does not exist, so a label never tells
// its owner what is in a directory they cannot read.
func Name(root string) string {
	base := filepath.Base(root)
	if enc, ok := strings.CutPrefix(base, "-"); ok && enc != "" {
		var dir string
		_ = confine.AsOwnerOf(root, nil, func() error {
			dir = decode(strings.Split(enc, "-"))
			return nil
		})
		if dir != "" {
			return filepath.Base(dir)
		}
	}
	return recall.ProjectName(root)
}

// decode finds the directory whose path, / as -, is the tokens: at each
// level the longest run of tokens that names a directory there.
func decode(tokens []string) string {
	dir := "/"
	for i := 0; i < len(tokens); {
		j := len(tokens)
		for ; j > i; j-- {
			name := strings.Join(tokens[i:j], "-")
			if tokens[i] == "" {
				if j == i+1 {
					continue
				}
				name = "." + strings.Join(tokens[i+1:j], "-") // /.config is "--config"
			}
			if fi, err := os.Stat(filepath.Join(dir, name)); err == nil && fi.IsDir() {
				dir = filepath.Join(dir, name)
				break
			}
		}
		if j == i {
			return ""
		}
		i = j
	}
	return dir
}
