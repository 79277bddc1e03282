package confine

// Detached is a root that is not on this machine: the directory another
// host captured memory in, searched on a central node through the state
// that host replicated (fleet/). Its ID is the host's; it holds no file
// here: its globs match nothing and it opens nothing.
func Detached(id ID) *Root {
	return &Root{path: id.Path, dir: id.Path, dev: id.Dev, ino: id.Ino, owner: Identity{UID: id.UID}}
}

// Detached reports a root made by Detached.
func (r *Root) Detached() bool { return r.os == nil }
