package control

import "golang.org/x/sys/unix"

// peerUID is the uid of a unix socket's peer (SO_PEERCRED); -1 if unknown.
func peerUID(fd int) int {
	cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return -1
	}
	return int(cred.Uid)
}
