package install

import (
	"encoding/xml"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/layout/registry"
	"github.com/memwatch/memwatch/policy"
)

var update = flag.Bool("update", false, "rewrite golden files")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		os.MkdirAll("testdata", 0o755)
		os.WriteFile(path, []byte(got), 0o644)
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update creates it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file:\n%s", name, got)
	}
}

func testConfig(t *testing.T, user bool) Config {
	p, err := policy.Parse("p.yaml", []byte(`version: 1
shutdown_timeout: 20s
stores:
  - name: apps
    layout: now-history
    paths: ["/srv/spaces/*/apps/*", "/var/lib/agents/main"]
`), registry.Specs())
	if err != nil {
		t.Fatal(err)
	}
	return FromPolicy(Config{User: user, Executable: "/usr/bin/memwatch", Policy: "/etc/memwatch/policy.d", Home: "/home/ada"}, p)
}

func TestUnitGolden(t *testing.T) {
	sys, err := Unit(testConfig(t, false))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "system.service", sys)
	user, err := Unit(testConfig(t, true))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "user.service", user)
	for _, want := range []string{"Type=notify", "ExecStartPre=/usr/bin/memwatch validate --policy /etc/memwatch/policy.d", "ExecReload=/bin/sh -c 'kill -HUP $MAINPID'",
		"Restart=on-failure", "RestartSec=5s", "TimeoutStopSec=35s", "StateDirectory=memwatch", "NoNewPrivileges=yes", "ProtectSystem=strict",
		"ReadWritePaths=-/srv/spaces", "ReadWritePaths=-/var/lib/agents/main", "PrivateTmp=yes", "ProtectHome=read-only", "UMask=0077", "WantedBy=multi-user.target"} {
		if !strings.Contains(sys, want+"\n") {
			t.Errorf("system unit lacks %q", want)
		}
	}
	if !strings.Contains(user, "WantedBy=default.target\n") || strings.Contains(user, "multi-user.target") {
		t.Error("a user unit must be wanted by default.target")
	}
}

func TestUnitHomeRootsAreWritable(t *testing.T) {
	cfg := testConfig(t, false)
	cfg.ReadWrite = []string{"/home/ada/agents"}
	u, _ := Unit(cfg)
	// /home stays read-only but for the roots under it.
	if !strings.Contains(u, "ProtectHome=read-only\n") || !strings.Contains(u, "ReadWritePaths=-/home/ada/agents\n") {
		t.Errorf("a root under /home: want ProtectHome=read-only and ReadWritePaths for the root:\n%s", u)
	}
	cfg.ReadWrite = []string{"/home"}
	if u, _ := Unit(cfg); strings.Contains(u, "ProtectHome=") {
		t.Error("ProtectHome set although /home itself is a root's directory")
	}
}

// TestUnitWritesStateAndSocketDirs: a policy's own state_dir and control
// socket directory are writable under ProtectSystem=strict.
func TestUnitWritesStateAndSocketDirs(t *testing.T) {
	p, err := policy.Parse("p.yaml", []byte("version: 1\nstate_dir: /srv/mwstate\ncontrol:\n  socket: /srv/mwsock/memwatch.sock\nstores:\n  - name: a\n    layout: now-history\n    paths: [\"/srv/agents/*\"]\n"), registry.Specs())
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, false)
	cfg.ReadWrite = nil // from the policy
	u, err := Unit(FromPolicy(cfg, p))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ReadWritePaths=-/srv/agents\n", "ReadWritePaths=-/srv/mwstate\n", "ReadWritePaths=-/srv/mwsock\n", "ProtectSystem=strict\n",
		"CapabilityBoundingSet=CAP_SETUID CAP_SETGID CAP_DAC_READ_SEARCH\n", "ExecStartPre=+/bin/mkdir -p -m 0755 /srv/mwsock\n", "SystemCallFilter=@system-service\n", "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6\n"} {
		if !strings.Contains(u, want) {
			t.Errorf("unit lacks %q:\n%s", want, u)
		}
	}
}

// TestUnitVerifies runs systemd-analyze verify on the rendered units.
func TestUnitVerifies(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze not installed")
	}
	dir := t.TempDir()
	for _, user := range []bool{false, true} {
		cfg := testConfig(t, user)
		cfg.Executable, _ = os.Executable() // verify checks that ExecStart exists
		u, _ := Unit(cfg)
		p := filepath.Join(dir, "memwatch.service")
		os.WriteFile(p, []byte(u), 0o644)
		args := []string{"verify"}
		if user {
			args = append(args, "--user")
		}
		out, err := exec.Command("systemd-analyze", append(args, p)...).CombinedOutput()
		// Only complaints about our unit count; the host's other units are not ours.
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "memwatch.service") {
				t.Errorf("systemd-analyze verify (user=%v): %s", user, l)
			}
		}
		if err != nil && strings.Contains(string(out), "memwatch.service") {
			t.Errorf("systemd-analyze verify failed: %v\n%s", err, out)
		}
	}
}

func TestPlistParses(t *testing.T) {
	for _, user := range []bool{false, true} {
		cfg := testConfig(t, user)
		cfg.Policy = "/Users/ada/memwatch & co/policy.yaml"
		s, err := Plist(cfg)
		if err != nil {
			t.Fatal(err)
		}
		// A generic XML walk: every element well-formed, and the keys we need present.
		dec := xml.NewDecoder(strings.NewReader(s))
		var keys, strs []string
		var last string
		for {
			tok, err := dec.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("plist (user=%v) is not well-formed XML: %v\n%s", user, err, s)
			}
			switch v := tok.(type) {
			case xml.StartElement:
				last = v.Name.Local
			case xml.CharData:
				switch last {
				case "key":
					keys = append(keys, string(v))
				case "string":
					strs = append(strs, string(v))
				}
				last = ""
			}
		}
		for _, k := range []string{"Label", "ProgramArguments", "RunAtLoad", "KeepAlive", "StandardOutPath", "StandardErrorPath"} {
			if !contains(keys, k) {
				t.Errorf("plist lacks key %s", k)
			}
		}
		if !contains(strs, "/Users/ada/memwatch & co/policy.yaml") {
			t.Errorf("policy path not round-tripped through XML escaping: %v", strs)
		}
		wantLog := "/var/log/memwatch.log"
		if user {
			wantLog = "/home/ada/Library/Logs/memwatch.log"
		}
		if !contains(strs, wantLog) {
			t.Errorf("log path %s missing: %v", wantLog, strs)
		}
	}
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

func TestStaticDir(t *testing.T) {
	for in, want := range map[string]string{"/srv/spaces/*/apps/*": "/srv/spaces", "/a/b": "/a/b", "/x/[ab]/c": "/x", "/*": "/"} {
		if got := staticDir(in); got != want {
			t.Errorf("staticDir(%q) = %q, want %q", in, got, want)
		}
	}
	_ = time.Second
}
