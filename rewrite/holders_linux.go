package rewrite

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Holder is a process that has a file open for writing.
type Holder struct {
	PID     int
	Command string
}

func (h Holder) String() string { return "pid " + strconv.Itoa(h.PID) + " (" + h.Command + ")" }

// writers lists the processes holding the inode open for writing, as far
// as /proc shows them (other users' processes need CAP_SYS_PTRACE, which
// the packaged service does not have: then the list is empty and the
// message says only what memwatch saw). It gives up after a second.
func writers(dev, ino uint64) []Holder {
	deadline := time.Now().Add(time.Second)
	procs, _ := filepath.Glob("/proc/[0-9]*")
	self := os.Getpid()
	var out []Holder
	for _, p := range procs {
		if time.Now().After(deadline) {
			break
		}
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil || pid == self {
			continue
		}
		fds, err := os.ReadDir(filepath.Join(p, "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			var st syscall.Stat_t
			if syscall.Stat(filepath.Join(p, "fd", fd.Name()), &st) != nil || uint64(st.Dev) != dev || st.Ino != ino {
				continue
			}
			if !openForWriting(filepath.Join(p, "fdinfo", fd.Name())) {
				continue
			}
			comm, _ := os.ReadFile(filepath.Join(p, "comm"))
			out = append(out, Holder{PID: pid, Command: strings.TrimSpace(string(comm))})
			break
		}
	}
	return out
}

// openForWriting reads the access mode from /proc/PID/fdinfo/FD.
func openForWriting(fdinfo string) bool {
	f, err := os.Open(fdinfo)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "flags:"); ok {
			flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			return err == nil && flags&syscall.O_ACCMODE != syscall.O_RDONLY
		}
	}
	return false
}
