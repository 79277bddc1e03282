// Command memwatch maintains the on-disk memory of AI agents.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/control"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// usageError marks errors that are the user's input: bad flags or policy.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func main() {
	if code, done := delegate(os.Args[1:]); done {
		os.Exit(code)
	}
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}

// globals are the flags every subcommand shares.
type globals struct {
	policy    string
	stateDir  string
	logFormat string
	logLevel  string
	stderr    io.Writer
	stdout    io.Writer
	// rawOut is stdout as given: what prints agents' text itself makes it
	// inert (print.go) before it adds colour.
	rawOut io.Writer
	// full is what memwatchd's commands keep (globals_full.go; empty in
	// the lean build).
	//lint:ignore U1000 the lean build's fullState is empty and unread
	full fullState
	// rawBytes: sizes printed as a count of bytes (--bytes), for scripts.
	rawBytes bool
	// reveal: show prints credentials as they are, for their owner
	// (show --reveal); masked otherwise.
	reveal bool
}

// size prints a size as a person reads it ("149 KiB"), or with --bytes as
// the count of bytes.
func (g *globals) size(n int64) string {
	if g.rawBytes {
		return fmt.Sprintf("%d", n)
	}
	return control.Human(n)
}

func execute(args []string, stdout, stderr io.Writer) int {
	// A pipe or a file gets the output in large writes, as rg and grep
	// write it (a search's results are dozens of small prints); a
	// terminal sees each line as it is printed.
	if !isTerminal(stdout) {
		buf := bufio.NewWriterSize(stdout, 64<<10)
		defer buf.Flush()
		stdout = buf
	}
	g := &globals{stdout: terminalOut(stdout), rawOut: stdout, stderr: stderr}
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
		Version:       version,
	}
	root.SetVersionTemplate(versionLine()) // --version prints what memwatch version does
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetArgs(args)
	pf := root.PersistentFlags()
	pf.StringVar(&g.policy, "policy", "", "policy file, or directory of *.yaml files")
	pf.StringVar(&g.stateDir, "state-dir", "", "state directory (default: policy state_dir, $STATE_DIRECTORY, /var/lib/memwatch as root, else $XDG_STATE_HOME/memwatch)")
	pf.StringVar(&g.logFormat, "log-format", "auto", "log format: auto (colour on a terminal, JSON otherwise), text or json")
	pf.StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	pf.BoolVar(&g.rawBytes, "bytes", false, "print sizes as a count of bytes instead of KiB, MiB, GiB")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{flagError(c, err)} })
	addCommands(root, g)
	usageArgs(root)
	// What a command does is journaled as manual; the daemon marks each of
	// its jobs with what started it.
	err := root.ExecuteContext(commandContext())
	if err == nil {
		return exitOK
	}
	var q quietExit
	if errors.As(err, &q) {
		return q.code
	}
	if errors.Is(err, errDelegate) {
		g.flush()
		return runFull(args)
	}
	fmt.Fprintln(stderr, "memwatch:", err)
	var ue usageError
	if errors.As(err, &ue) || isPolicyError(err) || errors.Is(err, control.ErrUsage) || unknownCommand(root, args) {
		return exitUsage
	}
	return exitFailure
}

// usageArgs makes what every command's argument check refuses (cobra's
// ExactArgs and the like) a usage error: exit code 2, as grep's. Flags
// are refused as usage errors by the flag error function.
func usageArgs(c *cobra.Command) {
	if check := c.Args; check != nil {
		c.Args = func(c *cobra.Command, args []string) error {
			if err := check(c, args); err != nil {
				var ue usageError
				if errors.As(err, &ue) {
					return err
				}
				return usageError{err}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		usageArgs(sub)
	}
}

// unknownCommand reports whether args name no command: cobra refuses
// them while finding the command, before any runs, and says so only in
// words.
func unknownCommand(root *cobra.Command, args []string) bool {
	_, _, err := root.Find(args)
	return err != nil
}

// badValue is pflag's message for a value that does not parse.
var badValue = regexp.MustCompile(`^invalid argument "(.*)" for "(.*)" flag: (strconv\.\w+: parsing ".*": )?(.*)$`)

// flagError says what is wrong with a flag in words, with the command's
// usage line: "-C, --context: abc is not a number" rather than strconv's.
func flagError(c *cobra.Command, err error) error {
	msg := err.Error()
	if m := badValue.FindStringSubmatch(msg); m != nil {
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

// needArgs is cobra.MinimumNArgs(n) saying what is missing, with the
// usage line.
func needArgs(n int, what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) < n {
			return usageError{fmt.Errorf("%s: give %s\nusage: %s", c.Name(), what, c.UseLine())}
		}
		return nil
	}
}

// errDelegate asks memwatchd, the full binary, to run the command instead
// (the lean memwatch, when no daemon answers what it asked).
var errDelegate = errors.New("this command is memwatchd's")

// flush writes out what the output holds (a pipe's is buffered): before
// memwatchd takes over the process, and as a follow prints.
func (g *globals) flush() {
	if f, ok := g.rawOut.(interface{ Flush() error }); ok {
		f.Flush()
	}
}

func printJSON(g *globals, v any) error {
	enc := json.NewEncoder(g.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
