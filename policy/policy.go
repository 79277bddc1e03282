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
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/fleet/hostname"
)

// Version is the only policy schema version this build understands.
const Version = 1

// Policy is a loaded, merged and validated set of policy files.
//
// Every key of a policy is declared once, as a field's tags (keys.go reads
// them): yaml (its name), default, min and max (bounds, written as in a
// policy; min:">0" is positive, zero:"off" lets 0 switch it off), enum,
// path (home: ~ expands; abs, local, glob, anyglob, globs), check (a named
// check of the value), required (what to say when it is missing), hint
// (the why after a bound's error) and doc (one line for the reference).
// The decoder, memwatch validate --expand and docs/policy.md's
// reference all follow from them.
type Policy struct {
	Version         int           "yaml:\"version\" required:\": add `version: 1` at the top\" check:\"version\" doc:\"the policy format; this memwatch reads 1\""
	StateDir        string        `yaml:"state_dir" path:"home" doc:"where memwatch keeps its state (--state-dir overrides; default /var/lib/memwatch as root)"`
	Control         Control       `yaml:"control" doc:"the control API: its socket, loopback TCP listener and tokens"`
	MCP             MCP           `yaml:"mcp" doc:"the memory tools over the Model Context Protocol"`
	Metrics         Metrics       `yaml:"metrics" doc:"a listener of its own for /metrics"`
	UI              UI            `yaml:"ui" doc:"the review pages on the control API"`
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout" default:"30s" doc:"how long running jobs may finish on SIGTERM"`
	// MaxJobs bounds how many jobs run at once across all roots.
	MaxJobs int `yaml:"max_jobs" default:"2" min:"1" doc:"jobs running at once across all roots"`
	// SpoolRetention is how long the spool keeps a captured log line's
	// text after every rule reading that log is done with it.
	SpoolRetention time.Duration `yaml:"spool_retention" default:"7d" doc:"captured session lines are kept this long after every rule is done with them"`
	// JournalMaxAge and JournalMaxBytes bound the journal (rotate.PruneJournal):
	// older records, then the oldest beyond the bytes, go, except those
	// the rules and the archives still need. Zero keeps everything.
	JournalMaxAge   time.Duration `yaml:"journal_max_age" doc:"journal records older than this go (0: kept), except those still needed"`
	JournalMaxBytes Size          `yaml:"journal_max_bytes" doc:"the journal's bytes beyond this go, oldest first (0: no bound)"`
	// JobTimeout bounds one job (a rule's run on a target): past it the
	// job is cancelled, reported, and its slot freed.
	JobTimeout time.Duration        `yaml:"job_timeout" default:"10m" min:"1s" hint:"a job past it is cancelled" doc:"a job past it is cancelled and reported"`
	LLM        map[string]*Endpoint `yaml:"llm" doc:"named OpenAI-compatible endpoints, for stores with compactor: llm"`
	// Replicate, when set, copies the state databases to S3-compatible
	// object storage as they change (replica/).
	Replicate *Replicate `yaml:"replicate" doc:"the state copied to S3-compatible object storage as it changes"`
	// Fleet, when set, makes this a central node: it follows the state
	// every host replicates under fleet.url (fleet/).
	Fleet  *Fleet   `yaml:"fleet" doc:"follow every host's replicated state under this URL (a central node)"`
	Stores []*Store `yaml:"stores" doc:"the stores: a layout applied to every root its paths match"`
	// Files lists the files the policy was loaded from, for messages.
	Files []string
}

// Control configures the control API.
type Control struct {
	Socket    string `yaml:"socket" path:"home" doc:"the API's unix socket (default /run/memwatch/memwatch.sock under systemd, else in the state directory)"`
	TCP       string `yaml:"tcp" check:"loopback" doc:"a loopback host:port to serve the API on as well; needs token_file or tokens"`
	TokenFile string `yaml:"token_file" path:"home" doc:"the administrator's bearer token, every right on every store (mode 0600)"`
	// Tokens are scoped credentials for the TCP listener: each reaches only
	// its stores or its owners' roots, with only its rights.
	Tokens []Token `yaml:"tokens" doc:"scoped tokens (memwatch token new makes one)"`
	// MaxRequestBody bounds what the API reads of a request body.
	MaxRequestBody Size `yaml:"max_request_body" default:"1MiB" min:"1KiB" doc:"what the API reads of a request body, at most"`
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
	Name   string   `yaml:"name" required:"" doc:"names the client in the log"`
	SHA256 string   `yaml:"sha256" required:": the SHA-256 of the token (memwatch token new makes a token and prints it)" check:"sha256" doc:"the token's SHA-256, never the token"`
	Stores []string `yaml:"stores" doc:"the stores it reaches"`
	Owners []string `yaml:"owners" doc:"the users (names or uids) whose roots it reaches"`
	Hosts  []string `yaml:"hosts" doc:"on a central node (fleet:), the hosts whose memory it reaches: HOST (all of it; with owners:, their roots there) or HOST:OWNER (the roots OWNER, a uid or a user name, owns there)"`
	Rights []string `yaml:"rights" enum:"read|write|undo" required:": give it rights: [read] (and write, undo as needed)" doc:"read, write, undo"`
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
	Listen string `yaml:"listen" check:"hostport" doc:"host:port of a listener serving /metrics only, with no token"`
}

// UI configures the review pages the daemon serves under /ui/ on its
// control API (memwatch ui serves the same pages on its own).
type UI struct {
	// Enabled serves them, to the same callers and within the same scope
	// as the API (socket peers, tokens). Off by default.
	Enabled bool `yaml:"enabled" doc:"serve the review pages under /ui/ on the control API"`
}

// MCP configures the memory tools memwatch serves over the Model Context
// Protocol (memwatch mcp, and /mcp on the control API).
type MCP struct {
	// AllowUndo offers memory_undo, with which an agent can revert what
	// memwatch (or another agent's tool call) changed in its root. Off by
	// default: an undo is the operator's decision.
	AllowUndo bool `yaml:"allow_undo" doc:"offer memory_undo to agents"`
	// ReadOnly leaves out the tools that write (memory_write,
	// memory_append, memory_patch, memory_stamp).
	ReadOnly bool `yaml:"read_only" doc:"leave out the tools that write"`
	// MaxSessions bounds the MCP sessions open at once on /mcp, and
	// MaxSessionsPerClient those of one client (a uid on the socket, a
	// token): a client's new session past its share ends its session
	// used least recently; past MaxSessions, the client holding the most
	// gives up its least recently used, and when no client holds more
	// than its share the new one is refused (503). SessionIdle ends a
	// session no request used for that long.
	MaxSessions          int           `yaml:"max_sessions" default:"64" min:"1" doc:"MCP sessions open at once on /mcp; past it the client holding the most gives one up, or a new one is refused"`
	MaxSessionsPerClient int           `yaml:"max_sessions_per_client" default:"16" min:"1" doc:"MCP sessions one client (a user, a token) holds at once on /mcp; its new one past it ends its least recently used"`
	SessionIdle          time.Duration `yaml:"session_idle" default:"10m" min:"1s" doc:"a session no request used for this long ends"`
}

// S3 is a connection to a bucket of S3-compatible storage, declared once
// for the sections that name one (replicate, fleet).
type S3 struct {
	URL            string `yaml:"url" required:": s3://BUCKET/PREFIX" check:"s3url" doc:"s3://BUCKET/PREFIX: the bucket, and where in it (replicate: this host's state; fleet: each host's under PREFIX/<host>)"`
	Bucket, Prefix string // from URL
	Endpoint       string `yaml:"endpoint" check:"s3endpoint" doc:"an S3-compatible server's URL; none for AWS"`
	Region         string `yaml:"region" default:"us-east-1" doc:"the bucket's region"`
	// The credentials: environment variables or files (0600) naming the
	// access key id and the secret; none: the AWS SDK's default chain.
	AccessKeyEnv   string `yaml:"access_key_env" doc:"the environment variable holding the access key id"`
	SecretKeyEnv   string `yaml:"secret_key_env" doc:"the environment variable holding the secret key"`
	AccessKeyFile  string `yaml:"access_key_file" path:"home" check:"secretfile" doc:"or a file holding it (mode 0600)"`
	SecretKeyFile  string `yaml:"secret_key_file" path:"home" check:"secretfile" doc:"or a file holding it (mode 0600)"`
	ForcePathStyle bool   `yaml:"force_path_style" doc:"bucket in the path, not the host name (most S3-compatible servers want it)"`
	// Encryption with age: what the bucket holds is encrypted to the
	// recipients, and opened with the identities.
	AgeRecipientsFile string `yaml:"age_recipients_file" path:"home" doc:"replicate: encrypt every object with age to these recipients (age's recipients file: one age1... or ssh key per line); none: the bucket holds the memory in the clear"`
	AgeIdentityFile   string `yaml:"age_identity_file" path:"home" check:"secretfile" doc:"the age identities that open the bucket's objects (mode 0600): memwatch state restore and a fleet's central node read with them"`
}

// Replicate is where the state databases are replicated: an S3 bucket
// and prefix, on AWS or any S3-compatible server.
type Replicate struct {
	S3 `yaml:",inline"`
	// Retention is how long snapshots and WAL segments stay in the bucket.
	Retention time.Duration `yaml:"retention" default:"72h" min:"1h" hint:"snapshots older than it are deleted from the bucket" doc:"how long snapshots and WAL segments stay in the bucket"`
	// SyncInterval is how often changes are sent: the lag, at most.
	SyncInterval     time.Duration `yaml:"sync_interval" default:"1s" min:"50ms" max:"1m" hint:"how far the bucket may be behind" doc:"how often changes are sent: about how far the bucket is behind"`
	SnapshotInterval time.Duration `yaml:"snapshot_interval" default:"24h" min:"1m" doc:"how often a whole snapshot is sent: a restore replays the changes since the last"`
	Pos              Pos
}

// Fleet is where a central node finds the hosts: each replicates its
// state to URL/<host> (its replicate.url), and the central node follows
// every one it finds there, read-only.
type Fleet struct {
	S3 `yaml:",inline"`
	// Interval is how often each host's databases are checked for changes:
	// a listing of the bucket per database, the central node's cost when
	// idle, and about how far behind it is.
	Interval time.Duration `yaml:"interval" default:"5s" min:"100ms" max:"1m" hint:"each check lists the bucket once per database of each host" doc:"how often each host's replica is checked for new changes (a listing per database; a host quiet for a minute every second interval): about how far behind the central node is"`
	// MaxHosts bounds the hosts followed: past it, new ones are reported
	// and left out.
	MaxHosts int `yaml:"max_hosts" default:"256" min:"1" doc:"hosts followed at most; more are reported and left out"`
	// StoppedAfter is how long without a change in the bucket a host is
	// shown as stopped (or idle: the bucket cannot tell).
	StoppedAfter time.Duration `yaml:"stopped_after" default:"10m" min:"1s" doc:"a host with no change in the bucket for this long is shown as stopped"`
	Pos          Pos
}

// Host is the replicate section of one host of the fleet: where its
// state is, with the fleet's endpoint and credentials.
func (f *Fleet) Host(name string) *Replicate {
	s3 := f.S3
	s3.URL, s3.Prefix = strings.TrimSuffix(f.URL, "/")+"/"+name, strings.Trim(f.Prefix+"/"+name, "/")
	return &Replicate{S3: s3, Pos: f.Pos}
}

// Endpoint is a named OpenAI-compatible LLM endpoint.
type Endpoint struct {
	Name             string
	BaseURL          string            `yaml:"base_url" required:"" check:"llmurl" doc:"the endpoint's URL, e.g. http://127.0.0.1:11434/v1"`
	Model            string            `yaml:"model" required:"" doc:"the model to ask"`
	APIKeyEnv        string            `yaml:"api_key_env" doc:"the environment variable holding the API key"`
	APIKeyFile       string            `yaml:"api_key_file" path:"home" check:"secretfile" doc:"or a file holding it (mode 0600)"`
	Timeout          time.Duration     `yaml:"timeout" default:"30s" min:">0" doc:"per attempt; 429, 5xx and timeouts are retried"`
	MaxConcurrency   int               `yaml:"max_concurrency" default:"2" min:"1" doc:"requests at once"`
	Temperature      float64           `yaml:"temperature" default:"0.2" min:"0" max:"2" doc:"sampling temperature"`
	MaxOutputTokens  int               `yaml:"max_output_tokens" doc:"0: about half the input"`
	MaxInputTokens   int               `yaml:"max_input_tokens" default:"8000" min:"256" doc:"input tokens a request may send"`
	DailyTokenBudget int64             `yaml:"daily_token_budget" default:"200000" min:"1" hint:"the budget is a hard cap and cannot be switched off" doc:"tokens a day, a hard cap"`
	Headers          map[string]string `yaml:"headers" doc:"extra HTTP headers"`
	Pos              Pos
}

// Store is one configured store: a layout applied to every root its globs match.
type Store struct {
	Name string `yaml:"name" required:"" check:"storename" doc:"unique; lowercase letters, digits, . _ -"`
	// Preset is the agent preset the store was expanded from ("" for none).
	Preset    string        `yaml:"preset" doc:"an agent's preset: its layout, paths and options"`
	Layout    string        `yaml:"layout" doc:"now-history, facts-episodes, memory-history, session-detail or app-records"`
	Paths     []string      `yaml:"paths" path:"globs" doc:"globs of the store's roots (~ expands); each match is a root"`
	Compactor string        `yaml:"compactor" default:"heuristic" enum:"heuristic|llm" doc:"heuristic (offline) or llm"`
	LLM       string        `yaml:"llm" default:"default" doc:"the endpoint compactor: llm uses"`
	Settle    time.Duration `yaml:"settle" default:"500ms" min:">0" doc:"quiet time before the rules run (at most 10x when writes go on)"`
	Cooldown  time.Duration `yaml:"cooldown" default:"5m" doc:"after a rewrite, a rule waits this long per file"`
	Sweep     time.Duration `yaml:"sweep" default:"1h" min:"1m" zero:"off" doc:"every root evaluated again this often, whatever changed (0: off)"`
	// MaxLoss is the fraction (0..1) of protected units a rewrite may drop.
	MaxLoss float64 `yaml:"max_loss" default:"0.25" kind:"fraction" doc:"the share of protected sections an LLM rewrite may drop"`
	// MaxFileSize is the largest file a rule loads whole; a larger one is
	// skipped with a warning (it stays as it is).
	MaxFileSize Size `yaml:"max_file_size" default:"256MiB" min:"1KiB" doc:"the largest file a rule loads whole"`
	// MaxLine is the longest log line decoded; a longer line is counted and
	// cited, its text cut at this length.
	MaxLine Size `yaml:"max_line" default:"1MiB" min:"1KiB" doc:"the longest log line decoded; a longer one is cut"`
	// User and Group, when set, are who memwatch acts as in this store's
	// roots (whose permissions it checks, who owns what it creates), instead
	// of each root directory's owner.
	User  string `yaml:"user" doc:"act as this user in the roots, not each root's owner"`
	Group string `yaml:"group" doc:"and this group (needs user)"`
	// MaxWatches bounds the inotify watches of the store's roots; a root
	// that would pass it is polled instead. 0 (the default) is a quarter of
	// the kernel's fs.inotify.max_user_watches, at least 8192.
	MaxWatches int `yaml:"max_watches" min:"1" hint:"beyond it a root is polled" doc:"inotify watches of the store's roots; beyond, a root is polled (default: a quarter of fs.inotify.max_user_watches)"`
	// MaxRead bounds the bytes one job reads from session logs (a range to
	// consolidate or summarize): what is beyond it is left for the next.
	MaxRead Size `yaml:"max_read" default:"16MiB" min:"64KiB" doc:"bytes one job reads from session logs"`
	// AllowUndo lets memwatch undo act on this store's records through the
	// daemon (CLI, API, review page); memory_undo over MCP also needs
	// mcp.allow_undo.
	AllowUndo bool `yaml:"allow_undo" default:"true" doc:"undo of this store's changes through the daemon"`
	// Archive retention (rotate/): archives kept per file beyond the
	// newest, their maximum age, the archive bytes per root, and the age
	// after which archives are gzip-compressed. Zero keeps everything.
	ArchiveKeep     int           `yaml:"archive_keep" doc:"archives kept per file beyond the newest (0: all)"`
	ArchiveMaxAge   time.Duration `yaml:"archive_max_age" doc:"older archives go (0: kept)"`
	ArchiveMaxBytes Size          `yaml:"archive_max_bytes" doc:"archive bytes per root; the oldest go first (0: no bound)"`
	CompressAfter   time.Duration `yaml:"compress_after" doc:"older archives are gzip-compressed (0: never)"`
	// Versions keeps every settled version of the store's memory files
	// (versions/): VersionsKeep per file, VersionsMaxAge, VersionsMaxBytes
	// per root (zero: no bound of that kind). ShrinkWarn is the share of
	// its lines a file may lose in one agent write before memwatch warns;
	// RestoreDeleted brings a memory file an agent deleted back at once.
	Versions         bool          `yaml:"versions" default:"true" doc:"keep every settled version of the memory files"`
	VersionsKeep     int           `yaml:"versions_keep" default:"100" doc:"versions per file (0: all)"`
	VersionsMaxAge   time.Duration `yaml:"versions_max_age" doc:"older versions go (0: kept)"`
	VersionsMaxBytes Size          `yaml:"versions_max_bytes" default:"64MiB" doc:"stored version bytes per root; the oldest go first"`
	ShrinkWarn       float64       `yaml:"shrink_warn" default:"0.5" min:">0" max:"1" hint:"a share of a file's lines, e.g. 0.5" doc:"warn when one agent write removes more than this share of a file's lines"`
	RestoreDeleted   bool          `yaml:"restore_deleted" doc:"put a memory file an agent deleted back at once"`
	// Options are the layout's own keys: a pointer to the options struct
	// the layout declares (see LayoutSpec); layouts read it with OptionsOf.
	Options any
	Pos     Pos
}

// Defaults other packages use without a store at hand; the declarations
// (Store.MaxRead, Control.MaxRequestBody) say the same, and a test holds
// them to it.
const (
	DefaultMaxRead        Size = 16 << 20
	DefaultMaxRequestBody Size = 1 << 20
)

// Pos is a position in a policy file.
type Pos struct {
	File   string
	Line   int
	Column int
}

func (p Pos) String() string { return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Column) }

// Default returns the policy used before any file is decoded: every
// key's declared default.
func Default() *Policy {
	p := &Policy{Version: Version, LLM: map[string]*Endpoint{}}
	setDefaults(reflect.ValueOf(p).Elem())
	return p
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
		for _, h := range t.Hosts {
			if _, _, err := HostScope(h); err != nil {
				errs = append(errs, &Error{Pos: t.Pos, Msg: fmt.Sprintf("control.tokens %q: %v", t.Name, err)})
			}
		}
		if len(t.Hosts) > 0 && p.Fleet == nil && !partial {
			errs = append(errs, &Error{Pos: t.Pos, Msg: fmt.Sprintf("control.tokens %q: hosts: is for a central node: add a fleet: section, or remove hosts:", t.Name)})
		}
	}
	return errs
}

// HostScope reads a token's hosts: entry: HOST, or HOST:OWNER (uid -1:
// every owner).
func HostScope(s string) (host string, uid int, err error) {
	host, owner, scoped := strings.Cut(s, ":")
	if !hostname.Valid(host) {
		return "", 0, fmt.Errorf("host %q: a host is named as under fleet.url (letters, digits, '.', '_', '-'), optionally :OWNER", s)
	}
	if !scoped {
		return host, -1, nil
	}
	if uid, err = OwnerUID(owner); err != nil {
		return "", 0, fmt.Errorf("host %q: owner %q: %w", s, owner, err)
	}
	return host, uid, nil
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

// Roots expands the store's globs now, as memwatch finds roots: from each
// glob's fixed part without following a symbolic link (confine.GlobRoots;
// what it refuses the watcher reports). A glob that matches nothing is not
// an error: roots may appear later and the watcher picks them up.
func (s *Store) Roots() []string {
	var out []string
	for _, id := range s.RootIDs() {
		out = append(out, id.Path)
	}
	return out
}

// RootIDs is Roots with the identity of each directory (or database file)
// as discovery saw it; its UID is the user memwatch acts as there (the
// store's user:, else the owner).
func (s *Store) RootIDs() []confine.ID {
	seen := map[string]bool{}
	var out []confine.ID
	user := -1
	if s.User != "" {
		if uid, err := OwnerUID(s.User); err == nil {
			user = uid
		}
	}
	for _, g := range s.Paths {
		found, _ := confine.GlobRoots(g, s.Layout == "app-records") // app-records roots are database files
		for _, id := range found {
			if !seen[id.Path] {
				seen[id.Path] = true
				if user >= 0 {
					id.UID = user
				}
				out = append(out, id)
			}
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
// characters (confine.StaticDir).
func StaticDir(g string) string { return confine.StaticDir(g) }

// Within is what a root of the store must resolve inside: the static
// directory of each glob (for a database root named without wildcards, its
// directory).
func (s *Store) Within() []string {
	var out []string
	for _, g := range s.Paths {
		out = append(out, confine.GlobBase(g))
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
	if r := p.Replicate; r != nil && r.AgeRecipientsFile == "" {
		out = append(out, &Error{Pos: r.Pos, Msg: "replicate: no age_recipients_file: the bucket will hold every agent's memory, and the credentials in it, in the clear; name an age recipients file (age-keygen -o key.txt; age-keygen -y key.txt > recipients.txt)"})
	}
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
