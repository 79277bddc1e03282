package daemon

import (
	"fmt"
	"net/http"
	"time"

	"github.com/memwatch/memwatch/access"
	"github.com/memwatch/memwatch/share"
)

// share runs a request within its client's share (package share): the
// administrator's as they come, an event stream with no deadline, any
// other request once it has a slot, or 429.
func (d *Daemon) share(c *access.Caller, w http.ResponseWriter, r *http.Request, h http.Handler) {
	rc := http.NewResponseController(w)
	if share.IsStream(r) {
		// Deadlines of their own: the stream's heartbeat fails on a
		// client that is gone.
		_ = rc.SetReadDeadline(time.Time{})
		_ = rc.SetWriteDeadline(time.Time{})
		h.ServeHTTP(w, r)
		return
	}
	_ = rc.SetWriteDeadline(time.Now().Add(share.RequestWriteTimeout))
	if r.Body != nil && r.Body != http.NoBody {
		// The body within share.RequestReadTimeout (a POST whose body never
		// comes holds nothing longer); then no deadline, so a request
		// that runs long is not cancelled by one (net/http cancels a
		// request whose connection's read fails).
		_ = rc.SetReadDeadline(time.Now().Add(share.RequestReadTimeout))
		r.Body = &share.BodyRead{ReadCloser: r.Body, RC: rc}
	}
	if c.IsAdmin() {
		h.ServeHTTP(w, r)
		return
	}
	release, ok := d.shares.Acquire(r.Context(), c.Name)
	if !ok {
		if r.Context().Err() != nil {
			return // the client left
		}
		d.shares.Refused.Say(c.Name, "control API request refused: this client runs as many requests at once as it may",
			"client", c.Name, "path", r.URL.Path, "at_once", d.shares.PerClient)
		w.Header().Set("Retry-After", "1")
		writeErr(w, http.StatusTooManyRequests, fmt.Errorf("%s runs %d requests at once already (and memwatch serves every user): try again in a moment", c.Name, d.shares.PerClient))
		return
	}
	defer release()
	h.ServeHTTP(w, r)
}
