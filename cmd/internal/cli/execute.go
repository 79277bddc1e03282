// Package cli is what memwatch, the client, and memwatchd, every command,
// share: the global flags, the commands both run (recall, show, log,
// versions, status, version), how they print, and exit codes. It links
// only control: the client stays a few milliseconds to start.
//
// A shared command asks its Backend for what it prints: the client's asks
// the daemon and hands the command to memwatchd when none answers
// (ErrDelegate); memwatchd's asks the daemon or does the work itself.
package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/control"
)

// Exit codes, as grep's.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// UsageError marks errors that are the user's input: bad flags or policy.
type UsageError struct{ Err error }

func (u UsageError) Error() string { return u.Err.Error() }
func (u UsageError) Unwrap() error { return u.Err }

// Backend answers the shared commands: the daemon through the client, or
// memwatchd's own work.
type Backend interface {
	// AnswerRecall answers a search.
	AnswerRecall(ctx context.Context, req control.RecallRequest) (control.RecallResponse, error)
	// ShowCitation returns the lines a citation names and where they came
	// from, dir the root a relative citation is in ("" the current
	// directory).
	ShowCitation(ctx context.Context, cite, dir string) ([]control.Shown, string, error)
	// ShowArchive prints an archive or a kept copy, decompressed.
	ShowArchive(path string, raw bool, p Paint) error
	// FileStatus prints a memory file's structure.
	FileStatus(path string, asJSON bool) error
	// DaemonStatus is the running daemon's status.
	DaemonStatus(ctx context.Context) (control.Status, error)
	// OpenJournal opens the action journal for log.
	OpenJournal(ctx context.Context) (Journal, error)
	// Versions prints the versions of a file, or the files of a root that
	// have versions.
	Versions(ctx context.Context, host, arg string, o Listing) error
}

// Journal is the action journal as log reads it.
type Journal interface {
	Read(ctx context.Context, q control.JournalQuery) ([]control.Record, error)
	// CheckNames refuses a store, root or rule that names nothing (a usage
	// error), when nothing matched.
	CheckNames(ctx context.Context, q control.JournalQuery) error
	// Kept counts the kept copies of what q names.
	Kept(ctx context.Context, q control.JournalQuery) int
	Close()
}

// Program is one of the two binaries, as Execute runs it.
type Program struct {
	// Version is the binary's version (-ldflags "-X main.version=...").
	Version string
	// Commands adds the program's commands to root; it sets g.Backend.
	Commands func(root *cobra.Command, g *Globals)
	// Context is the context a command runs in.
	Context func() context.Context
	// IsUsage says an error is the user's input (exit 2) beside the
	// usage errors every command returns (a policy that does not load).
	IsUsage func(error) bool
	// Route, when set, may run args some other way before root does
	// (done true, with the exit code): the client hands memwatchd every
	// command it does not have.
	Route func(root *cobra.Command, args []string) (code int, done bool)
	// Delegate runs args in memwatchd when a command returns ErrDelegate;
	// nil: ErrDelegate is an error like any other.
	Delegate func(args []string) int
}

// Globals are the flags every subcommand shares.
type Globals struct {
	Policy    string
	StateDir  string
	LogFormat string
	LogLevel  string
	Stderr    io.Writer
	Stdout    io.Writer
	// RawOut is stdout as given: what prints agents' text itself makes it
	// inert (print.go) before it adds colour.
	RawOut io.Writer
	// RawBytes: sizes printed as a count of bytes (--bytes), for scripts.
	RawBytes bool
	// Reveal: show prints credentials as they are, for their owner
	// (show --reveal); masked otherwise.
	Reveal bool
	// Version is the program's.
	Version string
	// Backend answers the shared commands.
	Backend Backend
}

// Size prints a size as a person reads it ("149 KiB"), or with --bytes as
// the count of bytes.
func (g *Globals) Size(n int64) string {
	if g.RawBytes {
		return fmt.Sprintf("%d", n)
	}
	return control.Human(n)
}

// Execute runs the program's command that args name, and returns its exit
// code.
func Execute(p Program, args []string, stdout, stderr io.Writer) int {
	// A pipe or a file gets the output in large writes, as rg and grep
	// write it (a search's results are dozens of small prints); a
	// terminal sees each line as it is printed.
	if !isTerminal(stdout) {
		buf := bufio.NewWriterSize(stdout, 64<<10)
		defer buf.Flush()
		stdout = buf
	}
	g := &Globals{Stdout: terminalOut(stdout), RawOut: stdout, Stderr: stderr, Version: p.Version}
	root := &cobra.Command{
		Use:   "memwatch",
		Short: "Keep AI agents' on-disk memory bounded, organized and searchable",
		Long: `memwatch watches the memory directories of AI agents and maintains them with
no change to the agents: it archives and compacts oversize memory files,
keeps views current, and journals every change so it can be undone.

Start with:  memwatch init --write   then   memwatch run   (the policy is ~/.config/memwatch/policy.yaml,
or /etc/memwatch/policy.d as root; --policy FILE or $MEMWATCH_POLICY names another)`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       p.Version,
	}
	root.SetVersionTemplate(g.versionLine()) // --version prints what memwatch version does
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetArgs(args)
	pf := root.PersistentFlags()
	pf.StringVar(&g.Policy, "policy", "", "policy file, or directory of *.yaml files")
	pf.StringVar(&g.StateDir, "state-dir", "", "state directory (default: policy state_dir, $STATE_DIRECTORY, /var/lib/memwatch as root, else $XDG_STATE_HOME/memwatch)")
	pf.StringVar(&g.LogFormat, "log-format", "auto", "log format: auto (colour on a terminal, JSON otherwise), text or json")
	pf.StringVar(&g.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	pf.BoolVar(&g.RawBytes, "bytes", false, "print sizes as a count of bytes instead of KiB, MiB, GiB")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return UsageError{flagError(c, err)} })
	p.Commands(root, g)
	usageArgs(root)
	groups(root)
	if p.Route != nil {
		if code, done := p.Route(root, args); done {
			return code
		}
	}
	ctx := context.Background()
	if p.Context != nil {
		ctx = p.Context()
	}
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	var q QuietExit
	if errors.As(err, &q) {
		return q.Code
	}
	if errors.Is(err, ErrDelegate) && p.Delegate != nil {
		g.Flush()
		return p.Delegate(args)
	}
	fmt.Fprintln(stderr, "memwatch:", err)
	var ue UsageError
	if errors.As(err, &ue) || p.IsUsage != nil && p.IsUsage(err) || errors.Is(err, control.ErrUsage) || unknownCommand(root, args) {
		return ExitUsage
	}
	return ExitFailure
}

// usageArgs makes what every command's argument check refuses (cobra's
// ExactArgs and the like) a usage error: exit code 2, as grep's. Flags
// are refused as usage errors by the flag error function.
func usageArgs(c *cobra.Command) {
	if check := c.Args; check != nil {
		c.Args = func(c *cobra.Command, args []string) error {
			if err := check(c, args); err != nil {
				var ue UsageError
				if errors.As(err, &ue) {
					return err
				}
				return UsageError{err}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		usageArgs(sub)
	}
}

// groups makes each command that only groups others (memwatch state,
// memwatch service) refuse a word that names none of them, as the top
// level does: cobra prints such a command's help for any argument and
// exits 0, so "memwatch state migrate" looked like it had worked.
// Without an argument it prints its help, as before.
func groups(c *cobra.Command) {
	for _, sub := range c.Commands() {
		groups(sub)
	}
	if !c.HasParent() || !c.HasSubCommands() || c.Runnable() {
		return
	}
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			return c.Help()
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
		if c.SuggestionsMinimumDistance <= 0 {
			c.SuggestionsMinimumDistance = 2 // as cobra takes it for the top level
		}
		if s := c.SuggestionsFor(args[0]); len(s) > 0 {
			msg += "; did you mean " + strings.Join(s, " or ") + "?"
		}
		var names []string
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				names = append(names, sub.Name())
			}
		}
		return UsageError{fmt.Errorf("%s\nits commands: %s (%s --help says more)", msg, strings.Join(names, ", "), c.CommandPath())}
	}
}

// unknownCommand reports whether args name no command: cobra refuses
// them while finding the command, before any runs, and says so only in
// words.
func unknownCommand(root *cobra.Command, args []string) bool {
	_, _, err := root.Find(args)
	return err != nil
}

// badValue is pflag's message for a value that does not parse, compiled
// when a flag is wrong: at init, every command's start paid for it.
var badValue = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^invalid argument "(.*)" for "(.*)" flag: (strconv\.\w+: parsing ".*": )?(.*)$`)
})

// flagError says what is wrong with a flag in words, with the command's
// usage line: "-C, --context: abc is not a number" rather than strconv's.
func flagError(c *cobra.Command, err error) error {
	msg := err.Error()
	if m := badValue().FindStringSubmatch(msg); m != nil {
		why := m[4]
		if m[3] != "" {
			why = "not a number"
			if strings.Contains(m[4], "out of range") {
				why = "out of range"
			}
		}
		msg = fmt.Sprintf("%s: %q is %s", m[2], m[1], why)
	}
	return fmt.Errorf("%s\nusage: %s", msg, c.UseLine())
}

// NeedArgs is cobra.MinimumNArgs(n) saying what is missing, with the
// usage line.
func NeedArgs(n int, what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) < n {
			return UsageError{fmt.Errorf("%s: give %s\nusage: %s", c.Name(), what, c.UseLine())}
		}
		return nil
	}
}

// ErrDelegate asks memwatchd, the full binary, to run the command instead
// (the lean memwatch, when no daemon answers what it asked).
var ErrDelegate = errors.New("this command is memwatchd's")

// flush writes out what the output holds (a pipe's is buffered): before
// memwatchd takes over the process, and as a follow prints.
func (g *Globals) Flush() {
	if f, ok := g.RawOut.(interface{ Flush() error }); ok {
		f.Flush()
	}
}

func PrintJSON(g *Globals, v any) error {
	enc := json.NewEncoder(g.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
