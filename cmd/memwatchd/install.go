package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/install"
	"github.com/memwatch/memwatch/policy"
)

// serviceFlags are shared by the service commands.
type serviceFlags struct {
	user     bool
	print    bool
	packaged bool
}

func (f *serviceFlags) config(g *globals, needPolicy bool) (install.Config, error) {
	exe, err := os.Executable()
	if err != nil {
		return install.Config{}, err
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	home, _ := os.UserHomeDir()
	cfg := install.Config{User: f.user, Executable: exe, StateDir: g.StateDir, Home: home, Packaged: f.packaged}
	if f.packaged {
		cfg.Executable = "/usr/bin/memwatch"
	}
	path, _, exists := g.PolicyRule()
	if !exists {
		if needPolicy && !f.packaged {
			return cfg, cli.UsageError{Err: fmt.Errorf("no policy at %s: the service runs memwatch run with one (memwatch init --write makes it, or give --policy FILE)", path)}
		}
		if g.Policy == "" {
			return cfg, nil
		}
	}
	cfg.Policy, _ = filepath.Abs(path)
	p := policy.Default()
	if !f.packaged {
		if p, err = g.LoadPolicy(); err != nil {
			return cfg, err
		}
	}
	return install.FromPolicy(cfg, p), nil
}

func installCmd(g *globals) *cobra.Command {
	f := &serviceFlags{}
	cmd := &cobra.Command{
		Use:   "install [--user] [--policy PATH]",
		Short: "Install memwatch as a service (systemd or launchd) that starts at boot or login",
		Long: `Install memwatch as a system service (root; systemd unit in
/etc/systemd/system or a LaunchDaemon) or, with --user, as a service of the
current user (systemd --user unit wanted by default.target, or a
LaunchAgent). The unit runs "memwatch run --policy PATH" with the policy
every command finds (--policy, $MEMWATCH_POLICY, ~/.config/memwatch/policy.yaml,
/etc/memwatch/policy.d as root), validates it before starting and on
reload, restarts on failure, and may only write to the store roots the
policy names. --print shows the unit instead of installing it. Where there
is no systemd or launchd, it says how to run memwatch instead.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := f.config(g, true)
			if err != nil {
				return err
			}
			if f.print {
				unit, err := install.Unit(cfg)
				if err != nil {
					return err
				}
				fmt.Fprint(g.Stdout, unit)
				return nil
			}
			msg, err := install.Control(cfg, "install")
			if err != nil {
				return err
			}
			fmt.Fprintln(g.Stdout, msg)
			return nil
		},
	}
	cmd.Flags().BoolVar(&f.user, "user", false, "install for the current user instead of the system")
	cmd.Flags().BoolVar(&f.print, "print", false, "print the systemd unit instead of installing it")
	cmd.Flags().BoolVar(&f.packaged, "packaged", false, "with --print: the unit shipped in packages (roots unknown, ProtectSystem=full)")
	cmd.Flags().MarkHidden("packaged")
	return cmd
}

// serviceActionCmd builds uninstall, start, stop and restart.
func serviceActionCmd(g *globals, action, short string) *cobra.Command {
	f := &serviceFlags{}
	cmd := &cobra.Command{
		Use:   action + " [--user]",
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := f.config(g, false)
			if err != nil {
				return err
			}
			msg, err := install.Control(cfg, action)
			if err != nil {
				return err
			}
			fmt.Fprintln(g.Stdout, msg)
			return nil
		},
	}
	cmd.Flags().BoolVar(&f.user, "user", false, "the current user's service instead of the system's")
	return cmd
}

func serviceCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "service", Short: "Service management (see also install, uninstall, start, stop, restart)"}
	cmd.AddCommand(serviceActionCmd(g, "status", "Show whether the memwatch service is installed and running"))
	return cmd
}
