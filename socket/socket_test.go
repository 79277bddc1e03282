package socket

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
)

// TestSocketDirectory: the control socket goes only where no other user
// could replace it, with its mode from the start.
func TestSocketDirectory(t *testing.T) {
	base, err := os.MkdirTemp("", "memwatch-sock")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	os.Chmod(base, 0o755)
	// A directory memwatch makes: the socket is there, with its mode.
	sock := filepath.Join(base, "run", "memwatch.sock")
	l, err := Listen(sock, 0o755, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(sock)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o666 {
		t.Errorf("the socket: %v %v, want a socket of mode 0666", fi.Mode(), err)
	}
	if c, err := net.Dial("unix", sock); err != nil {
		t.Errorf("dial the socket: %v", err)
	} else {
		c.Close()
	}
	l.Close()
	// Started again over the stale socket: replaced.
	if l, err = Listen(sock, 0o755, 0o666); err != nil {
		t.Errorf("over a stale socket: %v", err)
	} else {
		l.Close()
	}
	// A directory others may write to, or a link: refused, saying how to fix it.
	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	if _, err := Listen(filepath.Join(open, "memwatch.sock"), 0o755, 0o666); !errors.Is(err, ErrUnsafeDir) {
		t.Errorf("a world-writable directory: %v, want ErrUnsafeDir", err)
	}
	os.Symlink(filepath.Join(base, "run"), filepath.Join(base, "link"))
	if _, err := Listen(filepath.Join(base, "link", "memwatch.sock"), 0o755, 0o666); !errors.Is(err, ErrUnsafeDir) {
		t.Errorf("a linked directory: %v, want ErrUnsafeDir", err)
	}
	// Below a directory another user may rename entries in.
	os.MkdirAll(filepath.Join(open, "inner"), 0o755)
	if _, err := Listen(filepath.Join(open, "inner", "memwatch.sock"), 0o755, 0o666); !errors.Is(err, ErrUnsafeDir) {
		t.Errorf("below a world-writable directory: %v, want ErrUnsafeDir", err)
	}
	if os.Geteuid() == 0 {
		// Another user's directory, however strict its mode.
		theirs := filepath.Join(base, "theirs")
		os.Mkdir(theirs, 0o755)
		os.Chown(theirs, 4245, 4245)
		if _, err := Listen(filepath.Join(theirs, "memwatch.sock"), 0o755, 0o666); !errors.Is(err, ErrUnsafeDir) {
			t.Errorf("another user's directory: %v, want ErrUnsafeDir", err)
		}
	}
}
