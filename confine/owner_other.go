//go:build !linux

package confine

// actAs runs fn: file-system identities are a Linux feature; elsewhere
// memwatch runs as the user whose files it keeps (memwatch install --user).
func actAs(id Identity, fn func() error) error { return fn() }
