package policy

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
)

// ReadSecret reads a key or token file the policy names (an LLM endpoint's
// api_key_file, control.token_file). It must be a regular file, not a
// symbolic link, owned by the user memwatch runs as and readable by nobody
// else: a file another user could write, or read, is no secret of the
// administrator's.
func ReadSecret(path, what string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return "", fmt.Errorf("%s %s is a symbolic link; name the file itself", what, path)
		}
		return "", fmt.Errorf("%s: %w", what, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return "", fmt.Errorf("%s %s is not a regular file", what, path)
	case int(st.Uid) != os.Geteuid():
		return "", fmt.Errorf("%s %s belongs to uid %d, not to memwatch's user (uid %d); run chown %d %s", what, path, st.Uid, os.Geteuid(), os.Geteuid(), path)
	case fi.Mode().Perm()&0o077 != 0:
		return "", fmt.Errorf("%s %s is readable by group or others (mode %04o); run chmod 600 %s", what, path, fi.Mode().Perm(), path)
	case fi.Size() > 64<<10:
		return "", fmt.Errorf("%s %s is %d bytes; a key or token is a line", what, path, fi.Size())
	}
	b := make([]byte, fi.Size())
	n, err := f.ReadAt(b, 0)
	if err != nil && n < len(b) {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	return strings.TrimSpace(string(b[:n])), nil
}
