package policy

import (
	"fmt"

	"github.com/memwatch/memwatch/confine"
)

// OpenRoot opens a root of the store with the store's checks (the static
// prefix of its globs, its size bound, its user): what a job, an index
// task or a memory tool sees of the root. An app-records root is its
// database file.
func (s *Store) OpenRoot(path string) (*confine.Root, error) { return s.OpenRootIn(path, nil) }

// OpenRootIn is OpenRoot as one of a batch of opens (a search's roots)
// that share what they found of the trusted directories on the way.
func (s *Store) OpenRootIn(path string, pre *confine.Prefixes) (*confine.Root, error) {
	o := confine.Options{Within: s.Within(), MaxFileSize: int64(s.MaxFileSize), Prefixes: pre}
	if s.User != "" {
		id, err := confine.LookupIdentity(s.User, s.Group)
		if err != nil {
			return nil, fmt.Errorf("store %s: user %s: %w", s.Name, s.User, err)
		}
		o.Owner = &id
	}
	if s.Layout == "app-records" {
		return confine.OpenFile(path, o)
	}
	return confine.Open(path, o)
}
