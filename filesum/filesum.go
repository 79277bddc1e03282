// Package filesum keeps the sha256 of the files memwatch appends to, so
// that an append, and the version and journal record that follow it, cost
// in proportion to the bytes appended, not to the file.
//
// The journal and the versions name a file's content by its sha256. An
// append-only history grows to megabytes; hashing it whole for every entry
// appended (by the rewrite to journal it, then by the version capture)
// made each consolidation cost more as the history grew (issue #44).
//
// A Registry remembers, per file (device and inode), the sha256 states of
// prefixes of it that memwatch hashed (a sha256 state can be continued
// with the bytes that follow), together with the file's size and
// modification time when memwatch last knew its whole content. Its
// guarantees:
//   - a state is handed out as a prefix of a file only while the file's
//     size and mtime are those memwatch recorded after its own last read
//     or write of it; any other writer changes the mtime (or the size), and
//     the file is hashed whole again, once, before memwatch relies on it;
//   - so the states of one file always describe the bytes it holds now:
//     memwatch's own appends extend the chain (Record), anything else
//     starts a new one.
//
// What an mtime cannot tell: on kernels whose file times come from a
// coarse clock (before Linux 6.13's fine-grained timestamps, or on other
// file systems), a write of the same size within the same clock tick as
// memwatch's own (a few milliseconds) keeps both size and mtime; it is
// seen at the file's next change. An agent that appends changes the size.
//
// The registry is memory only: a restart hashes each file whole once.
package filesum

import (
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"sync"
	"syscall"
	"time"
)

// maxFiles bounds the files remembered; the least recently used go first.
const maxFiles = 4096

// maxStates bounds the prefix states kept per file (the newest).
const maxStates = 64

// State is the sha256 state of a file's first Size bytes.
type State struct {
	Size int64
	Sum  string // hex sha256 of those bytes
	mid  []byte // the marshaled hash state, to continue it
}

// Zero is the state of no bytes.
func Zero() State { return Extend(State{}, nil) }

// Extend returns the state of st's bytes followed by b.
func Extend(st State, b []byte) State {
	h := resume(st)
	h.Write(b)
	return finish(h, st.Size+int64(len(b)))
}

// resume continues st's hash (a fresh one for the zero State).
func resume(st State) hash.Hash {
	h := sha256.New()
	if st.mid != nil {
		if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(st.mid); err != nil {
			panic(fmt.Sprintf("filesum: resume a sha256 state: %v", err)) // we marshaled it
		}
	}
	return h
}

func finish(h hash.Hash, size int64) State {
	mid, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		panic(fmt.Sprintf("filesum: save a sha256 state: %v", err))
	}
	return State{Size: size, Sum: hex.EncodeToString(h.Sum(nil)), mid: mid}
}

// ExtendFrom returns the state of st's bytes followed by those of r from
// offset st.Size to end.
func ExtendFrom(st State, r io.ReaderAt, end int64) (State, error) {
	h := resume(st)
	n, err := io.Copy(h, io.NewSectionReader(r, st.Size, end-st.Size))
	if err == nil && n != end-st.Size {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return State{}, fmt.Errorf("hash %d bytes: %w", end-st.Size, err)
	}
	return finish(h, end), nil
}

// Registry remembers the states of files; safe for concurrent use. The
// zero value is not usable: New makes one.
type Registry struct {
	mu    sync.Mutex
	files map[id]*file
	tick  int64
}

type id struct{ dev, ino uint64 }

// file is what is known of one file: while its size and mtime are these,
// every state listed is a prefix of it, and the last is all of it.
type file struct {
	size, mtime int64
	states      []State
	used        int64
	// writing is closed when memwatch's append in progress is recorded
	// (nil: none in progress).
	writing chan struct{}
}

// maxWait bounds how long a lookup waits for an append in progress.
const maxWait = 2 * time.Second

// New returns an empty registry.
func New() *Registry { return &Registry{files: map[id]*file{}} }

func identity(fi fs.FileInfo) (id, int64, int64, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return id{}, 0, 0, false
	}
	return id{uint64(st.Dev), uint64(st.Ino)}, fi.Size(), fi.ModTime().UnixNano(), true
}

// lookup returns the file's entry when fi is the file as last known.
func (r *Registry) lookup(fi fs.FileInfo) *file {
	k, size, mtime, ok := identity(fi)
	if !ok || r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.files[k]
	if f != nil && f.writing != nil {
		// memwatch is appending to it: what a reader sees (a version
		// capture woken by the write) is recorded in a moment.
		w := f.writing
		r.mu.Unlock()
		select {
		case <-w:
		case <-time.After(maxWait):
		}
		r.mu.Lock()
		f = r.files[k]
	}
	if f == nil || f.size != size || f.mtime != mtime || len(f.states) == 0 {
		return nil
	}
	r.tick++
	f.used = r.tick
	return f
}

// Known returns the state of the whole file fi describes, when memwatch
// knows it (no read).
func (r *Registry) Known(fi fs.FileInfo) (State, bool) {
	f := r.lookup(fi)
	if f == nil {
		return State{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return f.states[len(f.states)-1], true
}

// Prefix returns the state of the first size bytes of the file fi
// describes when memwatch knows they are the bytes whose sha256 is sum,
// unchanged since.
func (r *Registry) Prefix(fi fs.FileInfo, size int64, sum string) (State, bool) {
	f := r.lookup(fi)
	if f == nil {
		return State{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(f.states) - 1; i >= 0; i-- {
		if s := f.states[i]; s.Size == size && s.Sum == sum {
			return s, true
		}
	}
	return State{}, false
}

// Sum returns the state of the whole file open as fd: known, or hashed
// whole now (and remembered when the file did not change meanwhile).
func (r *Registry) Sum(fd *os.File) (State, error) {
	fi, err := fd.Stat()
	if err != nil {
		return State{}, err
	}
	if st, ok := r.Known(fi); ok {
		return st, nil
	}
	st, err := ExtendFrom(Zero(), fd, fi.Size())
	if err != nil {
		return State{}, err
	}
	after, err := fd.Stat()
	if err != nil {
		return State{}, err
	}
	if !after.ModTime().Equal(fi.ModTime()) || after.Size() != fi.Size() {
		return st, errChanged
	}
	r.Record(after, st)
	return st, nil
}

// errChanged means a file changed while it was hashed: the sum is of the
// bytes read, not of the file now.
var errChanged = errors.New("file changed while being hashed")

// IsChanged reports the error Sum returns for a file written while it was
// hashed.
func IsChanged(err error) bool { return errors.Is(err, errChanged) }

// Record tells the registry that the file fi describes (as it is now) has
// the given states, oldest first, the last being the whole file. When the
// first continues what the registry knew of the file, the chain is
// extended; otherwise it starts again from these.
func (r *Registry) Record(fi fs.FileInfo, states ...State) {
	k, size, mtime, ok := identity(fi)
	if !ok || r == nil || len(states) == 0 || states[len(states)-1].Size != size {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.files[k]
	if f == nil {
		f = &file{}
		r.files[k] = f
	}
	chained := false
	for _, s := range f.states {
		chained = chained || (s.Size == states[0].Size && s.Sum == states[0].Sum)
	}
	if !chained {
		f.states = nil
	}
	for _, s := range states {
		if n := len(f.states); n == 0 || f.states[n-1].Size < s.Size {
			f.states = append(f.states, s)
		}
	}
	if len(f.states) > maxStates {
		f.states = append([]State(nil), f.states[len(f.states)-maxStates:]...)
	}
	f.size, f.mtime = size, mtime
	r.tick++
	f.used = r.tick
	if len(r.files) > maxFiles {
		var oldest id
		var first = true
		for k, f := range r.files {
			if first || f.used < r.files[oldest].used {
				oldest, first = k, false
			}
		}
		delete(r.files, oldest)
	}
}

// Writing marks the file fi describes as being appended to by memwatch:
// lookups of it wait (a moment at most) until the states of what was
// written are recorded, or done is called.
func (r *Registry) Writing(fi fs.FileInfo) (done func()) {
	k, _, _, ok := identity(fi)
	if !ok || r == nil {
		return func() {}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.files[k]
	if f == nil {
		f = &file{}
		r.files[k] = f
	}
	ch := make(chan struct{})
	f.writing = ch
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if f.writing == ch {
			f.writing = nil
		}
		close(ch)
	}
}

// Forget drops what is known of the file fi describes.
func (r *Registry) Forget(fi fs.FileInfo) {
	k, _, _, ok := identity(fi)
	if !ok || r == nil {
		return
	}
	r.mu.Lock()
	delete(r.files, k)
	r.mu.Unlock()
}
