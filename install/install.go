// Package install installs memwatch as a service: a systemd unit (system
// or user) on Linux, a launchd LaunchDaemon or LaunchAgent on macOS. The
// unit and the plist are memwatch's own templates, rendered here and handed
// to github.com/kardianos/service, whose defaults do not fit (no
// Type=notify, no hardening, and user services wanted by multi-user.target,
// which never starts them).
package install

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"text/template"
	"time"

	"github.com/kardianos/service"

	"github.com/memwatch/memwatch/policy"
)

// Name is the service name.
const Name = "memwatch"

// Config says what to install.
type Config struct {
	User       bool   // a user service (systemd --user, LaunchAgent) instead of a system one
	Executable string // absolute path of the memwatch binary
	Policy     string // absolute path of the policy file or directory
	StateDir   string // optional --state-dir
	// ReadWrite are the directories the service may write (store roots);
	// derived from the policy when nil.
	ReadWrite []string
	// Create are directories memwatch writes outside the store roots (a
	// policy's own state_dir, the socket's directory): the unit creates
	// them before the sandbox applies, since ReadWritePaths= cannot open
	// up a directory that does not exist yet. The state directories are
	// created 0700; Shared (the socket's) 0755, so every local user can
	// reach the socket and be served within what it owns.
	Create []string
	Shared []string
	// ShutdownTimeout is the policy's; the unit's stop timeout is above it.
	ShutdownTimeout time.Duration
	// Home is the user's home directory (launchd log paths, user units).
	Home string
	// Packaged renders the unit shipped in the .deb/.rpm, built before any
	// policy exists.
	Packaged bool
}

// ErrNeedRoot is returned when a system service is managed without root.
var ErrNeedRoot = errors.New("managing the system service needs root: run it with sudo, or use --user for a per-user service")

//go:embed memwatch.service.tmpl
var unitTemplate string

//go:embed memwatch.plist.tmpl
var plistTemplate string

// FromPolicy fills the writable directories and timeouts from a policy.
func FromPolicy(cfg Config, p *policy.Policy) Config {
	if p.ShutdownTimeout > 0 {
		cfg.ShutdownTimeout = p.ShutdownTimeout
	}
	if cfg.ReadWrite == nil {
		seen := map[string]bool{}
		for _, s := range p.Stores {
			for _, g := range s.Paths {
				d := staticDir(g)
				if s.Layout == "app-records" && d == g {
					d = filepath.Dir(g) // a database root: its directory holds -wal and temp files
				}
				if !seen[d] {
					seen[d] = true
					cfg.ReadWrite = append(cfg.ReadWrite, d)
				}
			}
		}
		// Everything else memwatch writes: its own state directory when the
		// policy names one (StateDirectory= covers the default) and the
		// control socket's directory; ProtectSystem=strict forbids the rest.
		for _, d := range []string{p.StateDir, cfg.StateDir, socketDir(p)} {
			if d != "" && !seen[d] {
				seen[d] = true
				cfg.ReadWrite = append(cfg.ReadWrite, d)
				if d == socketDir(p) {
					cfg.Shared = append(cfg.Shared, d)
				} else {
					cfg.Create = append(cfg.Create, d)
				}
			}
		}
		sort.Strings(cfg.Create)
		sort.Strings(cfg.ReadWrite)
	}
	return cfg
}

// socketDir is the directory of a control socket the policy places outside
// the state and runtime directories ("" otherwise).
func socketDir(p *policy.Policy) string {
	if p.Control.Socket == "" {
		return ""
	}
	d := filepath.Dir(p.Control.Socket)
	if d == "/run/memwatch" || d == "/var/lib/memwatch" {
		return ""
	}
	return d
}

// staticDir is the longest leading part of a glob without pattern characters.
func staticDir(g string) string {
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

// unitData is what the unit template sees.
type unitData struct {
	Config
	ExecStart   string
	Validate    string
	StopTimeout int
	ProtectHome bool
	Mkdirs      []string // quoted directories to create before the sandbox, 0700
	MkShared    []string // and 0755 (the socket's)
}

func quote(s string) string {
	if strings.ContainsAny(s, " \t\"'\\$%") {
		return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `$$`, `%`, `%%`).Replace(s) + `"`
	}
	return s
}

// Unit renders the systemd unit.
func Unit(cfg Config) (string, error) {
	d := unitData{Config: cfg, ProtectHome: true}
	args := []string{quote(cfg.Executable), "run", "--policy", quote(cfg.Policy), "--log-format", "json"}
	if cfg.StateDir != "" {
		args = append(args, "--state-dir", quote(cfg.StateDir))
	}
	d.ExecStart = strings.Join(args, " ")
	d.Validate = quote(cfg.Executable) + " validate --policy " + quote(cfg.Policy)
	for _, c := range cfg.Create {
		d.Mkdirs = append(d.Mkdirs, quote(c))
	}
	for _, c := range cfg.Shared {
		d.MkShared = append(d.MkShared, quote(c))
	}
	timeout := cfg.ShutdownTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	d.StopTimeout = int(timeout.Seconds()) + 15
	// ProtectHome=read-only stays even with roots under /home: their
	// ReadWritePaths= make just those writable. Only a root that is /home
	// or /root itself needs it off.
	for _, rw := range cfg.ReadWrite {
		if rw == "/home" || rw == "/root" || rw == "/" {
			d.ProtectHome = false
		}
	}
	var b bytes.Buffer
	t := template.Must(template.New("unit").Parse(unitTemplate))
	if err := t.Execute(&b, d); err != nil {
		return "", fmt.Errorf("render unit: %w", err)
	}
	return b.String(), nil
}

// Plist renders the launchd property list.
func Plist(cfg Config) (string, error) {
	esc := func(s string) string {
		var b bytes.Buffer
		b.WriteString(strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&apos;").Replace(s))
		return b.String()
	}
	args := []string{cfg.Executable, "run", "--policy", cfg.Policy, "--log-format", "json"}
	if cfg.StateDir != "" {
		args = append(args, "--state-dir", cfg.StateDir)
	}
	logDir := "/var/log"
	if cfg.User {
		logDir = filepath.Join(cfg.Home, "Library", "Logs")
	}
	data := map[string]any{"Label": Name, "Args": args, "Log": filepath.Join(logDir, Name+".log")}
	var b bytes.Buffer
	t := template.Must(template.New("plist").Funcs(template.FuncMap{"esc": esc}).Parse(plistTemplate))
	if err := t.Execute(&b, data); err != nil {
		return "", fmt.Errorf("render plist: %w", err)
	}
	return b.String(), nil
}

// noop satisfies service.Interface: memwatch's own run command is the
// program; the library only installs and controls it.
type noop struct{}

func (noop) Start(service.Service) error { return nil }
func (noop) Stop(service.Service) error  { return nil }

// New builds the service with memwatch's rendered unit or plist.
func New(cfg Config) (service.Service, error) {
	unit, err := Unit(cfg)
	if err != nil {
		return nil, err
	}
	plist, err := Plist(cfg)
	if err != nil {
		return nil, err
	}
	sc := &service.Config{
		Name:        Name,
		DisplayName: "memwatch",
		Description: "memwatch: maintains AI agents' on-disk memory",
		Executable:  cfg.Executable,
		Option: service.KeyValue{
			"UserService":   cfg.User,
			"SystemdScript": unit,
			"LaunchdConfig": plist,
			"KeepAlive":     true,
			"RunAtLoad":     true,
		},
	}
	return service.New(noop{}, sc)
}

// CheckExecutable refuses a system service whose binary someone but root
// could replace: the unit runs it as root, so the file and every directory
// above it must be root's and writable by no one else (a binary in an
// agent user's directory would give that user root).
func CheckExecutable(path string) error {
	for p := path; ; p = filepath.Dir(p) {
		fi, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("check %s: %w", p, err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		sticky := fi.IsDir() && fi.Mode()&os.ModeSticky != 0
		switch {
		case st.Uid != 0:
			return fmt.Errorf("the service would run %s as root, but %s belongs to uid %d, who could replace it: install memwatch where only root can write (sudo install -m 0755 %s /usr/local/bin/memwatch) and run that one's install", path, p, st.Uid, path)
		case fi.Mode().Perm()&0o022 != 0 && !sticky:
			return fmt.Errorf("the service would run %s as root, but %s is writable by group or others (mode %04o), who could replace it: install memwatch where only root can write (sudo install -m 0755 %s /usr/local/bin/memwatch)", path, p, fi.Mode().Perm(), path)
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// CheckPrivileges refuses to manage a system service without root.
func CheckPrivileges(user bool) error {
	if !user && os.Geteuid() != 0 {
		return ErrNeedRoot
	}
	return nil
}
