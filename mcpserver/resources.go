package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/memwatch/memwatch/confine"
)

// Resources: the markdown memory files of each root, read-only, as file://
// URIs. The list is computed on every resources/list (roots and files come
// and go), so nothing is registered per file; one template accepts every
// file:// URI and the read handler decides, through the root's confined
// handle, whether it names a memory file of a root.

// maxResources bounds the listing per root; maxResourceRead what one read
// returns.
const (
	maxResources    = 500
	maxResourceRead = 4 << 20
)

func (b *builder) addResources() {
	if b.bound != nil && b.bound.store.Layout == appRecords {
		return // a database, not files
	}
	b.srv.AddResourceTemplate(&mcp.ResourceTemplate{Name: "memory-file", URITemplate: "file:///{+path}", MIMEType: "text/markdown",
		Description: "A memory file of a root (read-only)."}, b.readResource)
	b.srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != "resources/list" {
				return next(ctx, method, req)
			}
			return &mcp.ListResourcesResult{Resources: b.listResources()}, nil
		}
	})
}

// rootsServed are the roots of this session, with their stores.
func (b *builder) rootsServed() []binding {
	if b.bound != nil {
		return []binding{*b.bound}
	}
	var out []binding
	for _, st := range b.s.cfg.Policy().Stores {
		if st.Layout == appRecords {
			continue
		}
		for _, id := range st.RootIDs() {
			if b.access.reaches(st, id) {
				out = append(out, binding{store: st, path: id.Path, id: id})
			}
		}
	}
	return out
}

func (b *builder) listResources() []*mcp.Resource {
	out := []*mcp.Resource{}
	for _, r := range b.rootsServed() {
		root, err := b.openRoot(r.store, r.path, &r.id)
		if err != nil {
			continue
		}
		n := 0
		_ = root.WalkDir(".", func(rel string, d fs.DirEntry, err error) error {
			if err != nil || n >= maxResources {
				return fs.SkipDir
			}
			name := d.Name()
			if d.IsDir() {
				if rel != "." && (strings.HasPrefix(name, ".") || name == "node_modules") {
					return fs.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(name, ".md") || strings.HasPrefix(name, ".") || confine.IsTemp(name) || !d.Type().IsRegular() {
				return nil
			}
			res := &mcp.Resource{URI: fileURI(root.Join(rel)), Name: filepath.ToSlash(rel), MIMEType: "text/markdown",
				Description: fmt.Sprintf("%s in %s (%s)", filepath.ToSlash(rel), r.path, r.store.Layout)}
			if fi, err := d.Info(); err == nil {
				res.Size = fi.Size()
			}
			out = append(out, res)
			n++
			return nil
		})
		root.Close()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].URI < out[j].URI })
	return out
}

// fileURI is the file:// URI of an absolute path.
func fileURI(p string) string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(p)}).String()
}

// readResource reads a memory file by its file:// URI, through the
// confined handle of the root that holds it.
func (b *builder) readResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "file" || u.Host != "" && u.Host != "localhost" {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	p := filepath.FromSlash(path.Clean(u.Path))
	for _, r := range b.rootsServed() {
		if !confine.Within(r.path, p) || p == r.path {
			continue
		}
		data, err := b.readIn(r, p)
		if err != nil {
			return nil, err
		}
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "text/markdown", Text: string(data)}}}, nil
	}
	return nil, mcp.ResourceNotFoundError(uri)
}

// readIn reads the file p of a root, refusing what leaves the root.
func (b *builder) readIn(r binding, p string) ([]byte, error) {
	root, err := b.openRoot(r.store, r.path, &r.id)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	rel, err := root.Rel(p)
	if err != nil {
		return nil, err
	}
	if !strings.HasSuffix(rel, ".md") {
		return nil, fmt.Errorf("%s: only markdown memory files are resources", rel)
	}
	fi, err := root.Stat(rel)
	if err != nil {
		return nil, err
	}
	if fi.Size() > maxResourceRead {
		return nil, fmt.Errorf("%s is %d bytes, over the %d a resource read returns; use the tools", rel, fi.Size(), maxResourceRead)
	}
	data, err := root.ReadFile(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, mcp.ResourceNotFoundError(fileURI(p))
	}
	return data, err
}
