package recall

import (
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"
)

// A compressed archive (retention gzips old ones) is searched as the text
// it holds: decompressed, at most the root's max_file_size of it, into a
// file of its own that is never linked into any directory, so the search
// reads it as it reads any file. The index never covers it.

// gz reports whether a file is read decompressed.
func (f file) gz() bool { return strings.HasSuffix(f.rel, ".gz") }

// gunzipped returns the decompressed content of fh as an open file.
func gunzipped(fh *os.File, fi fs.FileInfo, limit int64) (*os.File, fs.FileInfo, error) {
	zr, err := gzip.NewReader(io.LimitReader(fh, limit))
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", fi.Name(), err)
	}
	out, err := anonymousFile()
	if err != nil {
		return nil, nil, err
	}
	n, err := io.Copy(out, io.LimitReader(zr, limit+1))
	if err == nil && n > limit {
		err = fmt.Errorf("decompressed, over %d bytes", limit)
	}
	if err != nil {
		out.Close()
		return nil, nil, fmt.Errorf("read %s: %w", fi.Name(), err)
	}
	return out, gzInfo{FileInfo: fi, size: n}, nil
}

// anonymousFile is a file with no name: a memfd on Linux, else a
// temporary file removed at once.
func anonymousFile() (*os.File, error) {
	if f, err := memfd(); err == nil {
		return f, nil
	}
	f, err := os.CreateTemp("", "memwatch-gz-*")
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name())
	return f, nil
}

// gzInfo is a compressed file's info with its decompressed size.
type gzInfo struct {
	fs.FileInfo
	size int64
}

func (g gzInfo) Size() int64        { return g.size }
func (g gzInfo) ModTime() time.Time { return g.FileInfo.ModTime() }
