package install

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/kardianos/service"
)

// Control runs one action: install, uninstall, start, stop, restart or status.
// It returns a line to show the user.
func Control(cfg Config, action string) (string, error) {
	if err := CheckPrivileges(cfg.User); err != nil {
		return "", err
	}
	if err := supported(cfg); err != nil {
		return "", fmt.Errorf("%s service: %w", action, err)
	}
	s, err := New(cfg)
	if err != nil {
		return "", fmt.Errorf("%s service: %w", action, err)
	}
	if runtime.GOOS == "darwin" && action != "install" && action != "uninstall" && action != "status" {
		return launchctl(cfg, action)
	}
	switch action {
	case "status":
		st, err := s.Status()
		if errors.Is(err, service.ErrNotInstalled) {
			return "memwatch service is not installed", nil
		}
		if err != nil {
			return "", fmt.Errorf("service status: %w", err)
		}
		return "memwatch service is " + map[service.Status]string{service.StatusRunning: "running", service.StatusStopped: "stopped"}[st], nil
	case "install":
		if !cfg.User && !cfg.Packaged {
			if err := CheckExecutable(cfg.Executable); err != nil {
				return "", err
			}
		}
		if err := s.Install(); err != nil {
			return "", fmt.Errorf("install service: %w", err)
		}
		where := "systemd unit " + unitPath(cfg)
		if runtime.GOOS == "darwin" {
			where = "launchd plist " + plistPath(cfg)
		}
		return fmt.Sprintf("installed and enabled the memwatch service (%s); start it with: memwatch start%s", where, userFlag(cfg)), nil
	case "uninstall":
		_ = s.Stop()
		if err := s.Uninstall(); err != nil {
			return "", fmt.Errorf("uninstall service: %w", err)
		}
		return "stopped, disabled and removed the memwatch service", nil
	}
	if err := service.Control(s, action); err != nil {
		return "", fmt.Errorf("%s service: %w", action, err)
	}
	return fmt.Sprintf("memwatch service: %s done", action), nil
}

// supported says, before anything is written, when this machine cannot
// run the service asked for, and what to do instead.
func supported(cfg Config) error {
	sys := service.ChosenSystem()
	name := "none"
	if sys != nil {
		name = sys.String()
	}
	switch {
	case runtime.GOOS == "darwin":
		return nil
	case name == "linux-systemd" && !cfg.User:
		return nil
	case name == "linux-systemd":
		// A user service needs the user's systemd manager, which a login
		// over ssh without lingering, or a container, may not have.
		if out, err := exec.Command("systemctl", "--user", "show-environment").CombinedOutput(); err != nil {
			return fmt.Errorf("this session has no systemd user manager (systemctl --user: %s).\n%s",
				strings.TrimSpace(firstLine(string(out))), instead(cfg))
		}
		return nil
	}
	what := "user services"
	if !cfg.User {
		what = "services"
	}
	return fmt.Errorf("memwatch installs %s through systemd or launchd, and this machine runs %s.\n%s", what, name, instead(cfg))
}

// instead names the ways to run memwatch where its service cannot be
// installed.
func instead(cfg Config) string {
	policy := ""
	if cfg.Policy != "" {
		policy = " --policy " + cfg.Policy
	}
	steps := []string{
		"  - in the foreground (in tmux or screen to keep it after you log out): memwatch run" + policy,
		"  - from your login: add to ~/.profile: (memwatch run" + policy + " >>\"${XDG_STATE_HOME:-$HOME/.local/state}/memwatch.log\" 2>&1 &)",
	}
	if cfg.User {
		steps = append(steps, "  - as the system's service, for every user (root; systemd): sudo memwatch install",
			"  - with a user manager that outlives your sessions: sudo loginctl enable-linger $USER, log in again, then memwatch install --user")
	}
	return "Run it instead:\n" + strings.Join(steps, "\n")
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	if line == "" {
		return "failed"
	}
	return line
}

func userFlag(cfg Config) string {
	if cfg.User {
		return " --user"
	}
	return ""
}

func unitPath(cfg Config) string {
	if cfg.User {
		return filepath.Join(cfg.Home, ".config/systemd/user", Name+".service")
	}
	return "/etc/systemd/system/" + Name + ".service"
}

func plistPath(cfg Config) string {
	if cfg.User {
		return filepath.Join(cfg.Home, "Library/LaunchAgents", Name+".plist")
	}
	return "/Library/LaunchDaemons/" + Name + ".plist"
}

// launchctl uses the current verbs (bootstrap/bootout, kickstart) that the
// library's load/unload predate.
func launchctl(cfg Config, action string) (string, error) {
	domain := "system"
	if cfg.User {
		domain = fmt.Sprintf("gui/%d", os.Getuid())
	}
	var args [][]string
	switch action {
	case "start":
		args = [][]string{{"bootstrap", domain, plistPath(cfg)}}
	case "stop":
		args = [][]string{{"bootout", domain + "/" + Name}}
	case "restart":
		args = [][]string{{"kickstart", "-k", domain + "/" + Name}}
	default:
		return "", fmt.Errorf("unknown service action %q", action)
	}
	for _, a := range args {
		if out, err := exec.Command("launchctl", a...).CombinedOutput(); err != nil {
			return "", fmt.Errorf("launchctl %s: %v: %s", strings.Join(a, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return fmt.Sprintf("memwatch service: %s done", action), nil
}
