// Package policy loads and validates memwatch policy files.
//
// Loading is Default → decode → Validate and has no side effects. Every error
// names the file, line and column it comes from, so a user can jump to it.
package policy

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Version is the only policy schema version this build understands.
const Version = 1

// Policy is a loaded, merged and validated set of policy files.
type Policy struct {
	Version         int
	StateDir        string
	Control         Control
	MCP             MCP
	Metrics         Metrics
	UI              UI
	ShutdownTimeout time.Duration
	// MaxJobs bounds how many jobs run at once across all roots.
	MaxJobs int
	// SpoolRetention is how long the spool keeps a captured log line's
	// text after every rule reading that log is done with it.
	SpoolRetention time.Duration
	// JournalMaxAge and JournalMaxBytes bound the journal (rotate.PruneJournal):
	// older records, then the oldest beyond the bytes, go, except those
	// the rules and the archives still need. Zero keeps everything.
	JournalMaxAge   time.Duration
	JournalMaxBytes Size
	// JobTimeout bounds one job (a rule's run on a target): past it the
	// job is cancelled, reported, and its slot freed.
	JobTimeout time.Duration
	LLM        map[string]*Endpoint
	// Replicate, when set, copies the state databases to S3-compatible
	// object storage as they change (replica/).
	Replicate *Replicate
	Stores    []*Store
	// Files lists the files the policy was loaded from, for messages.
	Files []string
}

// Control configures the control API.
type Control struct {
	Socket    string
	TCP       string // optional loopback address, e.g. 127.0.0.1:7070
	TokenFile string // the administrator's bearer token (every right on every store)
	// Tokens are scoped credentials for the TCP listener: each reaches only
	// its stores or its owners' roots, with only its rights.
	Tokens []Token
	// MaxRequestBody bounds what the API reads of a request body.
	MaxRequestBody Size
}

// Rights a token may hold.
const (
	RightRead  = "read"  // status, journal, recall, show, the MCP tools that read
	RightWrite = "write" // trigger, compact, records removal, the MCP tools that write
	RightUndo  = "undo"  // undo, where the store allows it
)

// Token is a scoped credential of the control API. The policy holds the
// token's sha256, never the token (memwatch token new makes one).
type Token struct {
	Name   string
	SHA256 string   // hex
	Stores []string // store names it reaches; empty: none by name
	Owners []string // user names (or uids) whose roots it reaches
	Rights []string
	Pos    Pos
}

// Has reports whether the token holds right.
func (t Token) Has(right string) bool {
	for _, r := range t.Rights {
		if r == right {
			return true
		}
	}
	return false
}

// Metrics configures an extra listener that serves only /metrics, with no
// token, for a Prometheus scraper (the control API serves it too).
type Metrics struct {
	Listen string // host:port; "" for none
}

// UI configures the review pages the daemon serves under /ui/ on its
// control API (memwatch ui serves the same pages on its own).
type UI struct {
	// Enabled serves them, to the same callers and within the same scope
	// as the API (socket peers, tokens). Off by default.
	Enabled bool
}

// MCP configures the memory tools memwatch serves over the Model Context
// Protocol (memwatch mcp, and /mcp on the control API).
type MCP struct {
	// AllowUndo offers memory_undo, with which an agent can revert what
	// memwatch (or another agent's tool call) changed in its root. Off by
	// default: an undo is the operator's decision.
	AllowUndo bool
	// ReadOnly leaves out the tools that write (memory_write,
	// memory_append, memory_patch, memory_stamp).
	ReadOnly bool
	// MaxSessions bounds the MCP sessions open at once on /mcp; past it a
	// new session is refused (503). SessionIdle ends a session no request
	// used for that long.
	MaxSessions int
	SessionIdle time.Duration
}

// Replicate is where the state databases are replicated: an S3 bucket
// and prefix, on AWS or any S3-compatible server.
type Replicate struct {
	URL            string // s3://BUCKET/PREFIX as given
	Bucket, Prefix string // from URL
	Endpoint       string // empty: AWS
	Region         string
	// The credentials: environment variables or files (0600) naming the
	// access key id and the secret; none: the AWS SDK's default chain.
	AccessKeyEnv, SecretKeyEnv   string
	AccessKeyFile, SecretKeyFile string
	ForcePathStyle               bool
	// Retention is how long snapshots and WAL segments stay in the bucket.
	Retention time.Duration
	// SyncInterval is how often changes are sent: the lag, at most.
	SyncInterval time.Duration
	Pos          Pos
}

// Endpoint is a named OpenAI-compatible LLM endpoint.
type Endpoint struct {
	Name             string
	BaseURL          string
	Model            string
	APIKeyEnv        string
	APIKeyFile       string
	Timeout          time.Duration
	MaxConcurrency   int
	Temperature      float64
	MaxOutputTokens  int
	MaxInputTokens   int
	DailyTokenBudget int64
	Headers          map[string]string
	Pos              Pos
}

// Store is one configured store: a layout applied to every root its globs match.
type Store struct {
	Name string
	// Preset is the agent preset the store was expanded from ("" for none).
	Preset    string
	Layout    string
	Paths     []string // globs, with ~ already expanded
	Compactor string   // heuristic | llm
	LLM       string   // endpoint name
	Settle    time.Duration
	Cooldown  time.Duration
	Sweep     time.Duration
	// MaxLoss is the fraction (0..1) of protected units a rewrite may drop.
	MaxLoss float64
	// MaxFileSize is the largest file a rule loads whole; a larger one is
	// skipped with a warning (it stays as it is).
	MaxFileSize Size
	// MaxLine is the longest log line decoded; a longer line is counted and
	// cited, its text cut at this length.
	MaxLine Size
	// User and Group, when set, are who memwatch acts as in this store's
	// roots (whose permissions it checks, who owns what it creates), instead
	// of each root directory's owner.
	User, Group string
	// MaxWatches bounds the inotify watches of the store's roots; a root
	// that would pass it is polled instead. 0 (the default) is a quarter of
	// the kernel's fs.inotify.max_user_watches, at least 8192.
	MaxWatches int
	// MaxRead bounds the bytes one job reads from session logs (a range to
	// consolidate or summarize): what is beyond it is left for the next.
	MaxRead Size
	// AllowUndo lets memwatch undo act on this store's records through the
	// daemon (CLI, API, review page); memory_undo over MCP also needs
	// mcp.allow_undo.
	AllowUndo bool
	// Archive retention (rotate/): archives kept per file beyond the
	// newest, their maximum age, the archive bytes per root, and the age
	// after which archives are gzip-compressed. Zero keeps everything.
	ArchiveKeep     int
	ArchiveMaxAge   time.Duration
	ArchiveMaxBytes Size
	CompressAfter   time.Duration
	// Versions keeps every settled version of the store's memory files
	// (versions/): VersionsKeep per file, VersionsMaxAge, VersionsMaxBytes
	// per root (zero: no bound of that kind). ShrinkWarn is the share of
	// its lines a file may lose in one agent write before memwatch warns;
	// RestoreDeleted brings a memory file an agent deleted back at once.
	Versions         bool
	VersionsKeep     int
	VersionsMaxAge   time.Duration
	VersionsMaxBytes Size
	ShrinkWarn       float64
	RestoreDeleted   bool
	// Options are the layout's own keys: a pointer to the options struct
	// the layout declares (see LayoutSpec); layouts read it with OptionsOf.
	Options any
	Pos     Pos
}

// Defaults of the bounds.
const (
	DefaultMaxFileSize      Size = 256 << 20
	DefaultMaxLine          Size = 1 << 20
	DefaultMaxRead          Size = 16 << 20
	DefaultMaxWatches            = 0 // auto: see Store.MaxWatches
	DefaultMaxRequestBody   Size = 1 << 20
	DefaultVersionsKeep          = 100
	DefaultVersionsMaxBytes      = 64 << 20
	DefaultShrinkWarn            = 0.5
	DefaultJobTimeout            = 10 * time.Minute
	DefaultMCPSessions           = 64
	DefaultMCPSessionIdle        = 10 * time.Minute
)

// Pos is a position in a policy file.
type Pos struct {
	File   string
	Line   int
	Column int
}

func (p Pos) String() string { return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Column) }

// Default returns the policy used before any file is decoded.
func Default() *Policy {
	return &Policy{
		Version:         Version,
		ShutdownTimeout: 30 * time.Second,
		MaxJobs:         2,
		SpoolRetention:  7 * 24 * time.Hour,
		JobTimeout:      DefaultJobTimeout,
		Control:         Control{MaxRequestBody: DefaultMaxRequestBody},
		MCP:             MCP{MaxSessions: DefaultMCPSessions, SessionIdle: DefaultMCPSessionIdle},
		LLM:             map[string]*Endpoint{},
	}
}

var storeNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)

// Validate checks cross-field rules that decoding cannot see. Decoding already
// reports per-key problems with positions; Validate reports the rest.
func (p *Policy) Validate() error {
	if errs := p.validate(false); len(errs) > 0 {
		return errs
	}
	return nil
}

// validate runs the cross-field checks; partial (the policy had decoding
// errors) leaves out the checks that would only echo them (a store's LLM
// endpoint that failed to decode is no second error).
func (p *Policy) validate(partial bool) Errors {
	var errs Errors
	for _, s := range p.Stores {
		if s.Compactor == "llm" && !partial {
			if _, ok := p.LLM[s.LLM]; !ok {
				errs = append(errs, &Error{Pos: s.Pos, Msg: fmt.Sprintf("store %q: compactor llm needs endpoint %q under llm:, which is not defined%s", s.Name, s.LLM, suggest(s.LLM, mapKeys(p.LLM)))})
			}
		}
	}
	for _, s := range p.Stores {
		if s.Options == nil || partial {
			continue
		}
		if err := validateOptions(s.Options); err != nil {
			errs = append(errs, &Error{Pos: s.Pos, Msg: fmt.Sprintf("store %q: %v", s.Name, err)})
		}
	}
	for _, s := range p.Stores {
		if s.Group != "" && s.User == "" {
			errs = append(errs, &Error{Pos: s.Pos, Msg: fmt.Sprintf("store %q: group %q needs user: as well", s.Name, s.Group)})
		}
		if s.User != "" {
			if _, err := lookupUser(s.User); err != nil {
				errs = append(errs, &Error{Pos: s.Pos, Msg: fmt.Sprintf("store %q: user %q: %v", s.Name, s.User, err)})
			}
		}
		if s.Group != "" {
			if _, err := lookupGroup(s.Group); err != nil {
				errs = append(errs, &Error{Pos: s.Pos, Msg: fmt.Sprintf("store %q: group %q: %v", s.Name, s.Group, err)})
			}
		}
	}
	if p.Control.TCP != "" && p.Control.TokenFile == "" && len(p.Control.Tokens) == 0 {
		errs = append(errs, &Error{Pos: Pos{File: firstFile(p.Files)}, Msg: "control.tcp needs control.token_file or control.tokens: the TCP API is only served with a bearer token"})
	}
	for _, t := range p.Control.Tokens {
		for _, name := range t.Stores {
			if p.StoreByName(name) == nil && !partial {
				errs = append(errs, &Error{Pos: t.Pos, Msg: fmt.Sprintf("control.tokens %q: no store named %q%s", t.Name, name, suggest(name, p.storeNames()))})
			}
		}
		for _, o := range t.Owners {
			if _, err := OwnerUID(o); err != nil {
				errs = append(errs, &Error{Pos: t.Pos, Msg: fmt.Sprintf("control.tokens %q: owner %q: %v", t.Name, o, err)})
			}
		}
	}
	return errs
}

func (p *Policy) storeNames() []string {
	var out []string
	for _, s := range p.Stores {
		out = append(out, s.Name)
	}
	return out
}

func firstFile(fs []string) string {
	if len(fs) == 0 {
		return "policy"
	}
	return fs[0]
}

// StoreByName returns the store with that name, or nil.
func (p *Policy) StoreByName(name string) *Store {
	for _, s := range p.Stores {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// Roots expands the store's globs now. A glob that matches nothing is not an
// error: roots may appear later and the watcher picks them up.
func (s *Store) Roots() []string {
	seen := map[string]bool{}
	var out []string
	for _, g := range s.Paths {
		m, _ := filepath.Glob(g) // patterns were checked at load
		for _, r := range m {
			r = filepath.Clean(r)
			if seen[r] {
				continue
			}
			fi, err := os.Stat(r)
			if err != nil {
				continue
			}
			// app-records roots are database files; every other layout's root is a directory.
			if (s.Layout == "app-records") == fi.IsDir() {
				continue
			}
			seen[r] = true
			out = append(out, r)
		}
	}
	return out
}

// MatchesRoot reports whether path matches one of the store's globs.
func (s *Store) MatchesRoot(path string) bool {
	for _, g := range s.Paths {
		if ok, _ := filepath.Match(g, path); ok {
			return true
		}
	}
	return false
}

func expandHome(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if h, err := os.UserHomeDir(); err == nil {
			return filepath.Join(h, strings.TrimPrefix(p, "~"))
		}
	}
	return p
}

// StaticDir is the longest leading part of a glob without pattern
// characters: the directory every match lies in. A glob with no pattern
// characters is its own static part.
func StaticDir(g string) string {
	parts := strings.Split(filepath.Clean(g), string(filepath.Separator))
	i := 0
	for i < len(parts) && !strings.ContainsAny(parts[i], `*?[\`) {
		i++
	}
	if i == len(parts) {
		return filepath.Clean(g)
	}
	return string(filepath.Separator) + filepath.Join(parts[:i]...)
}

// Within is what a root of the store must resolve inside: the static
// directory of each glob (for a database root named without wildcards, its
// directory).
func (s *Store) Within() []string {
	var out []string
	for _, g := range s.Paths {
		d := StaticDir(g)
		if d == filepath.Clean(g) {
			d = filepath.Dir(d)
		}
		out = append(out, d)
	}
	return out
}

// systemDirs are directories that are never an agent's memory: a store
// root there (or a glob that matches them) is almost certainly a mistake.
var systemDirs = []string{"/proc", "/sys", "/dev", "/run", "/boot", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/var/lib/memwatch"}

// Warnings lists what is valid but probably wrong: store globs that reach
// the whole file system or system directories, and roots that overlap the
// state directory (memwatch would watch its own state). memwatch validate
// prints them; with --strict they are errors.
func (p *Policy) Warnings(stateDir string) Errors {
	var out Errors
	for _, s := range p.Stores {
		if w, ok := s.Options.(OptionsWarner); ok {
			for _, msg := range w.Warnings(s) {
				out = append(out, &Error{Pos: s.Pos, Msg: fmt.Sprintf("store %q: %s", s.Name, msg)})
			}
		}
	}
	for _, s := range p.Stores {
		for _, g := range s.Paths {
			static := StaticDir(g)
			switch {
			case static == "/":
				out = append(out, &Error{Pos: s.Pos, Msg: fmt.Sprintf("store %q: path %q starts at / (every directory it matches becomes a store root); name the directories that hold agent memory", s.Name, g)})
				continue
			}
			for _, sd := range systemDirs {
				if static == sd || strings.HasPrefix(static, sd+"/") || strings.HasPrefix(sd, static+"/") && static != "/var" && static != "/var/lib" {
					out = append(out, &Error{Pos: s.Pos, Msg: fmt.Sprintf("store %q: path %q reaches the system directory %s, which holds no agent memory", s.Name, g, sd)})
					break
				}
			}
			if stateDir != "" {
				sd := filepath.Clean(stateDir)
				if static == sd || strings.HasPrefix(sd, static+"/") || strings.HasPrefix(static, sd+"/") {
					out = append(out, &Error{Pos: s.Pos, Msg: fmt.Sprintf("store %q: path %q overlaps the state directory %s; keep memwatch's state outside store roots", s.Name, g, sd)})
				}
			}
		}
	}
	return out
}

// OwnerUID resolves a token's owner (a user name, or a uid that need not
// have a passwd entry) to a uid.
func OwnerUID(name string) (int, error) {
	if n, err := strconv.Atoi(name); err == nil && n >= 0 {
		return n, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(u.Uid)
}

func lookupUser(name string) (*user.User, error) {
	if u, err := user.Lookup(name); err == nil {
		return u, nil
	}
	return user.LookupId(name)
}

func lookupGroup(name string) (*user.Group, error) {
	if g, err := user.LookupGroup(name); err == nil {
		return g, nil
	}
	return user.LookupGroupId(name)
}
