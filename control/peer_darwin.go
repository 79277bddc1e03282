package control

import "golang.org/x/sys/unix"

// peerUID is the uid of a unix socket's peer (LOCAL_PEERCRED); -1 if unknown.
func peerUID(fd int) int {
	cred, err := unix.GetsockoptXucred(fd, unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	if err != nil {
		return -1
	}
	return int(cred.Uid)
}
