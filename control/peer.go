package control

import "net"

// PeerUID is the uid of the process at the other end of a unix socket
// connection, as the kernel says it (-1 when it cannot tell): the CLI asks
// it of the daemon it reached, the daemon of each client.
func PeerUID(c net.Conn) int {
	// A connection a listener wrapped (the daemon's bounds on them).
	for {
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = w.NetConn()
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return -1
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return -1
	}
	uid := -1
	_ = raw.Control(func(fd uintptr) { uid = peerUID(int(fd)) })
	return uid
}
