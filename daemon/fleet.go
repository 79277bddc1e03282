package daemon

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/memwatch/memwatch/access"
	"github.com/memwatch/memwatch/answer"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/fleet/mirror"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/versions"
)

// A central node (fleet:) serves the hosts it follows: search over the
// copy of each (fleet/mirror), a citation's lines and a memory file's
// versions from what each host replicated. The administrator reaches
// every host; a token, the hosts (and owners there) its hosts: names.
// A host's uids are the host's: nothing here maps them to local users.

// hostPath reports a path of another host (HOST:/path) in a request on a
// central node; it answers 404 when no such host is followed and 403
// when the caller does not reach the root the path is in there.
func (d *Daemon) hostPath(w http.ResponseWriter, r *http.Request, p string) (host, path string, isHost, ok bool) {
	host, path, isHost = mirror.SplitHostPath(p)
	if !isHost || d.fleet == nil {
		return "", "", false, false
	}
	caller := access.CallerOf(r.Context())
	if !caller.Has(policy.RightRead) {
		d.forbid(w, r, "it has no read right")
		return host, path, true, false
	}
	if !caller.ReachesHost(host) {
		d.forbid(w, r, fmt.Sprintf("it does not reach host %s", host))
		return host, path, true, false
	}
	if uid := mirror.HostOwner(r.Context(), d.cfg.StateDir, host, path); !caller.ReachesHostRoot(host, uid) {
		d.forbid(w, r, fmt.Sprintf("it does not reach the root of %s on host %s", path, host))
		return host, path, true, false
	}
	return host, path, true, true
}

// handleHostVersions answers /v1/versions?path=HOST:/path (a root: its
// files) and /v1/versions/content?path=HOST:/path&n=N.
func (d *Daemon) handleHostVersions(w http.ResponseWriter, r *http.Request, content bool) {
	host, path, _, ok := d.hostPath(w, r, r.URL.Query().Get("path"))
	if !ok {
		return
	}
	if content {
		n, err := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		if err != nil || n < 1 {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("n must be a version number (1, 2, ...), not %q", control.Clip(r.URL.Query().Get("n"))))
			return
		}
		data, _, err := mirror.HostVersion(r.Context(), d.cfg.StateDir, host, path, n)
		if err != nil {
			writeErr(w, http.StatusNotFound, err)
			return
		}
		writeJSON(w, http.StatusOK, VersionContent{Version: versions.Version{Root: host, Path: path, N: n}, Content: data})
		return
	}
	vs, files, _, err := mirror.HostVersions(r.Context(), d.cfg.StateDir, host, path)
	switch {
	case err != nil:
		writeErr(w, http.StatusNotFound, err)
	case files != nil:
		writeJSON(w, http.StatusOK, files)
	default:
		if vs == nil {
			vs = []versions.Version{}
		}
		writeJSON(w, http.StatusOK, vs)
	}
}

// handleHostShow answers /v1/show?cite=HOST:/path#L5.
func (d *Daemon) handleHostShow(w http.ResponseWriter, r *http.Request) {
	cite := r.URL.Query().Get("cite")
	if _, _, _, ok := d.hostPath(w, r, mirror.CitedPath(cite)); !ok {
		return
	}
	lines, _, _, err := mirror.Show(r.Context(), d.cfg.StateDir, cite)
	if err != nil {
		writeErr(w, http.StatusNotFound, err)
		return
	}
	_, path, _ := mirror.SplitHostPath(mirror.CitedPath(cite))
	writeJSON(w, http.StatusOK, ShowResponse{Path: cite, Lines: answer.Decode(lines, path, false)})
}
