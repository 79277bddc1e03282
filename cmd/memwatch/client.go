package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/memwatch/memwatch/control"
)

// errNoDaemon means nothing answers on the control socket.
var errNoDaemon = errors.New("memwatch daemon is not running")

// errNotDaemon means another user's process answers on the control socket.
var errNotDaemon = errors.New("refusing the control socket")

// control talks to a running daemon over its unix socket.
type controlClient struct {
	socket string
	http   *http.Client
	// policy, when set, is the policy (control.PolicyID) the daemon must
	// run: an answer naming another is not this command's daemon's.
	policy string
	// stamp, when set, is the policy files' control.PolicyStamp: the lean
	// memwatch hands the command to memwatchd when the daemon runs them
	// as they were before (edited since, perhaps broken: memwatchd loads
	// them and says so).
	stamp string
}

func newControl(socket string) *controlClient {
	return &controlClient{socket: socket, http: &http.Client{
		Timeout: 2 * time.Minute, // an undo may wait for a running job
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "unix", socket)
			if err != nil {
				return nil, err
			}
			// The daemon runs as root or as this user: a socket another
			// user's process answers is not memwatch's (it replaced the
			// daemon's), and what the CLI would send it is not theirs.
			if uid := control.PeerUID(c); uid >= 0 && uid != 0 && uid != os.Geteuid() {
				c.Close()
				return nil, fmt.Errorf("%w: the process answering on %s runs as uid %d, neither root nor you; it is not memwatch's daemon", errNotDaemon, socket, uid)
			}
			return c, nil
		}},
	}}
}

// do sends a request and decodes a JSON answer into out.
func (c *controlClient) do(ctx context.Context, method, path string, body io.Reader, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://memwatch"+path, body)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("%w (no answer on %s; if it runs with another --state-dir or policy, give the same, or set MEMWATCH_STATE_DIR)", errNoDaemon, c.socket)
		}
		return fmt.Errorf("control socket %s: %w", c.socket, err)
	}
	defer resp.Body.Close()
	if got := resp.Header.Get(control.PolicyHeader); c.policy != "" && got != "" && got != c.policy {
		return fmt.Errorf("%w: the daemon on %s runs the policy %s, not %s (give --policy, or start memwatch with this one)", errNoDaemon, c.socket, got, c.policy)
	}
	if got := resp.Header.Get(control.PolicyStampHeader); c.stamp != "" && got != "" && got != c.stamp {
		return fmt.Errorf("%w: the policy files changed since the daemon loaded them", errNoDaemon)
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&e)
		if e.Error == "" {
			e.Error = resp.Status
		}
		return &remoteError{status: resp.StatusCode, msg: e.Error}
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// remoteError is the daemon's answer to a request it refused: a 400 is
// the request's mistake (exit 2), a 404 something that is not there.
type remoteError struct {
	status int
	msg    string
}

func (e *remoteError) Error() string { return e.msg }

func (e *remoteError) Unwrap() error {
	switch e.status {
	case http.StatusBadRequest:
		return control.ErrUsage
	case http.StatusNotFound:
		return errRemoteNotFound
	}
	return nil
}

// errRemoteNotFound is the daemon's 404.
var errRemoteNotFound = errors.New("not found")
