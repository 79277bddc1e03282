package confine

import (
	"fmt"
	"io/fs"
	"os/user"
	"slices"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Identity is the user memwatch acts as in a root: its uid, primary gid and
// supplementary groups. Access to a file is decided as the kernel would
// decide it for that user, from the file's owner, group and mode, on the
// open descriptor (so nothing can change between the check and the read).
type Identity struct {
	UID    int
	GID    int
	Groups []int
}

// Permission bits asked of may.
const (
	mayRead  = 4
	mayWrite = 2
	mayExec  = 1
)

// may reports whether id may access a file with fi's owner and mode.
func (id Identity) may(fi fs.FileInfo, want uint32) bool {
	if id.UID == 0 {
		return true
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	mode := uint32(fi.Mode().Perm())
	var bits uint32
	switch {
	case int(st.Uid) == id.UID:
		bits = mode >> 6
	case int(st.Gid) == id.GID || slices.Contains(id.Groups, int(st.Gid)):
		bits = mode >> 3
	default:
		bits = mode
	}
	return bits&want == want
}

// MayRead reports whether id may read a file with this info.
func (id Identity) MayRead(fi fs.FileInfo) bool { return id.may(fi, mayRead) }

// MayWrite reports whether id may write a file with this info.
func (id Identity) MayWrite(fi fs.FileInfo) bool { return id.may(fi, mayWrite) }

// groupCache remembers users' supplementary groups for a minute: roots are
// opened for every job, and /etc/group does not change that often.
var groupCache = struct {
	sync.Mutex
	m map[int]cachedGroups
}{m: map[int]cachedGroups{}}

type cachedGroups struct {
	groups []int
	at     time.Time
}

// identityOf is the identity of a root directory's owner.
func identityOf(uid, gid int) Identity {
	id := Identity{UID: uid, GID: gid}
	if uid == 0 {
		return id
	}
	groupCache.Lock()
	c, ok := groupCache.m[uid]
	groupCache.Unlock()
	if ok && time.Since(c.at) < time.Minute {
		id.Groups = c.groups
		return id
	}
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		if gids, err := u.GroupIds(); err == nil {
			for _, g := range gids {
				if n, err := strconv.Atoi(g); err == nil {
					id.Groups = append(id.Groups, n)
				}
			}
		}
		if n, err := strconv.Atoi(u.Gid); err == nil && n != gid {
			id.Groups = append(id.Groups, n)
		}
	}
	sort.Ints(id.Groups)
	groupCache.Lock()
	groupCache.m[uid] = cachedGroups{groups: id.Groups, at: time.Now()}
	groupCache.Unlock()
	return id
}

// LookupIdentity resolves a user name (or numeric uid) and an optional
// group for a store's user: and group: keys.
func LookupIdentity(name, group string) (Identity, error) {
	u, err := user.Lookup(name)
	if err != nil {
		if _, nerr := strconv.Atoi(name); nerr == nil {
			u, err = user.LookupId(name)
		}
		if err != nil {
			return Identity{}, err
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if group != "" {
		g, err := user.LookupGroup(group)
		if err != nil {
			if _, nerr := strconv.Atoi(group); nerr == nil {
				g, err = user.LookupGroupId(group)
			}
			if err != nil {
				return Identity{}, err
			}
		}
		gid, _ = strconv.Atoi(g.Gid)
	}
	id := identityOf(uid, gid)
	id.GID = gid
	return id, nil
}

// key names the identity in a batch's keys (Prefixes): the search
// permission the kernel checks depends on all of it.
func (id Identity) key() string {
	return fmt.Sprint(id.UID, ":", id.GID, ":", id.Groups)
}
