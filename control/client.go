package control

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrNoDaemon means nothing answers on the control socket (or what
// answers runs another policy): the caller does the work itself, or hands
// it to memwatchd.
var ErrNoDaemon = errors.New("memwatch daemon is not running")

// ErrNotDaemon means another user's process answers on the control socket.
var ErrNotDaemon = errors.New("refusing the control socket")

// ErrNotFound is the daemon's 404: what was asked for is not there.
var ErrNotFound = errors.New("not found")

// What the daemon refused, said by a code beside its message (the answer's
// "code"), so a client branches on the error, never on its words: a
// RemoteError unwraps to the one its code names.
var (
	// ErrNoSuchLine: a citation names lines past the end of its file (or
	// of its generation in the spool).
	ErrNoSuchLine = errors.New("no such line")
	// ErrUnknownLog: the spool never captured the cited log.
	ErrUnknownLog = errors.New("the spool has no such log")
	// ErrNotARoot: a path named as a root is no store's root.
	ErrNotARoot = errors.New("not a root of any store of the policy")
)

var errorCodes = []struct {
	code string
	err  error
}{{"no_such_line", ErrNoSuchLine}, {"unknown_log", ErrUnknownLog}, {"not_a_root", ErrNotARoot}}

// ErrorCode is the code an answer gives for err ("" for none).
func ErrorCode(err error) string {
	for _, c := range errorCodes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return ""
}

// SystemSocket is the control socket of the system service (systemd's
// RuntimeDirectory=memwatch).
const SystemSocket = "/run/memwatch/memwatch.sock"

// Client is a typed client of the daemon's control API over its unix
// socket: one method per endpoint, so no caller builds a URL.
//
// It speaks HTTP/1.0 itself, a request a connection: the daemon answers
// without chunks and closes the connection after its answer, so reading
// to the end is reading the answer. net/http's client and the TLS it
// links were a third of the lean binary's start (its packages'
// initialisation and their pages), and its connection goroutines a
// handful of thread wake-ups a command, costly where a system call is;
// the daemon's server is net/http's.
type Client struct {
	// Socket is the control socket dialled.
	Socket string
	// policy, when set, is the policy (PolicyID) the daemon must run: an
	// answer naming another is not this command's daemon's.
	policy string
	// stamp, when set, is the policy files' PolicyStamp: an answer of a
	// daemon that runs them as they were before is not taken (the full
	// binary loads them and says what changed).
	stamp string
}

// requestTimeout bounds a request whose context has no deadline: an undo
// may wait for a running job.
const requestTimeout = 2 * time.Minute

// NewClient is a client of the daemon on socket.
func NewClient(socket string) *Client { return &Client{Socket: socket} }

// Dial connects to the daemon on socket. The daemon runs as root or as
// this user: a socket another user's process answers is not memwatch's
// (it replaced the daemon's), and what the CLI would send it is not
// theirs (ErrNotDaemon). The MCP proxy dials its HTTP client with it.
func Dial(ctx context.Context, socket string) (net.Conn, error) {
	c, err := dialBusy(ctx, socket)
	if err != nil {
		return nil, err
	}
	if uid := PeerUID(c); uid >= 0 && uid != 0 && uid != os.Geteuid() {
		c.Close()
		return nil, fmt.Errorf("%w: the process answering on %s runs as uid %d, neither root nor you; it is not memwatch's daemon", ErrNotDaemon, socket, uid)
	}
	return c, nil
}

// busyFor bounds how long a dial waits out a full listen queue.
const busyFor = 10 * time.Second

// dialBusy dials socket, waiting while its listen queue is full. A unix
// socket whose queue is full refuses a non-blocking connect with EAGAIN
// at once (Go's dials do not block), where a TCP connect would wait:
// another client's burst of connections would fail this one, however
// briefly the daemon takes to accept them. It tries again, from 1 ms
// doubling to 50 ms, until the context ends or busyFor has passed.
func dialBusy(ctx context.Context, socket string) (net.Conn, error) {
	var d net.Dialer
	wait, until := time.Millisecond, time.Now().Add(busyFor)
	for {
		c, err := d.DialContext(ctx, "unix", socket)
		if err == nil || !errors.Is(err, syscall.EAGAIN) {
			return c, err
		}
		full := fmt.Errorf("the daemon accepts no connection, its queue full since %v ago: %w", time.Since(until.Add(-busyFor)).Round(time.Millisecond), err)
		if time.Now().After(until) {
			return nil, full
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, full
		case <-t.C:
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// Expect makes the client refuse a daemon that runs another policy (id,
// PolicyID) or the same one as it was before its files changed (stamp,
// PolicyStamp; "" checks nothing).
func (c *Client) Expect(id, stamp string) { c.policy, c.stamp = id, stamp }

// Alive is GET /healthz: nil when the daemon answers.
func (c *Client) Alive(ctx context.Context) error {
	return c.Do(ctx, "GET", "/healthz", nil, nil)
}

// Status is GET /v1/status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var st Status
	return st, c.Do(ctx, "GET", "/v1/status", nil, &st)
}

// Journal is GET /v1/journal: a page of records.
func (c *Client) Journal(ctx context.Context, q JournalQuery) ([]Record, error) {
	var out []Record
	return out, c.Do(ctx, "GET", "/v1/journal?"+q.Values().Encode(), nil, &out)
}

// JournalCount is GET /v1/journal/count.
func (c *Client) JournalCount(ctx context.Context, q JournalQuery) (JournalCount, error) {
	var n JournalCount
	return n, c.Do(ctx, "GET", "/v1/journal/count?"+q.Values().Encode(), nil, &n)
}

// Recall is GET /v1/recall: a page of results.
func (c *Client) Recall(ctx context.Context, r RecallRequest) (RecallResponse, error) {
	var out RecallResponse
	return out, c.Do(ctx, "GET", "/v1/recall?"+r.Values().Encode(), nil, &out)
}

// Secrets is GET /v1/secrets: where credentials sit in the caller's
// roots, the spool's lines of them included.
func (c *Client) Secrets(ctx context.Context) (SecretsResponse, error) {
	var out SecretsResponse
	return out, c.Do(ctx, "GET", "/v1/secrets", nil, &out)
}

// Show is GET /v1/show: the lines a citation of root names.
func (c *Client) Show(ctx context.Context, root, cite string, reveal bool) (ShowResponse, error) {
	v := url.Values{"root": {root}, "cite": {cite}}
	if reveal {
		v.Set("reveal", "1")
	}
	var out ShowResponse
	return out, c.Do(ctx, "GET", "/v1/show?"+v.Encode(), nil, &out)
}

// Versions is GET /v1/versions?path=: a file's versions; out is
// []Version (or raw JSON).
func (c *Client) Versions(ctx context.Context, path string, out any) error {
	return c.Do(ctx, "GET", "/v1/versions?path="+url.QueryEscape(path), nil, out)
}

// VersionedFiles is GET /v1/versions?root=: the files of a root that have
// versions.
func (c *Client) VersionedFiles(ctx context.Context, root string) ([]string, error) {
	var out []string
	return out, c.Do(ctx, "GET", "/v1/versions?root="+url.QueryEscape(root), nil, &out)
}

// VersionContent is GET /v1/versions/content: version n of a file.
func (c *Client) VersionContent(ctx context.Context, path string, n int64, out any) error {
	return c.Do(ctx, "GET", fmt.Sprintf("/v1/versions/content?path=%s&n=%d", url.QueryEscape(path), n), nil, out)
}

// Restore is POST /v1/versions/restore (a RestoreRequest of the daemon).
func (c *Client) Restore(ctx context.Context, req, out any) error {
	return c.post(ctx, "/v1/versions/restore", req, out)
}

// RestoreDeleted is POST /v1/versions/restore-deleted.
func (c *Client) RestoreDeleted(ctx context.Context, req, out any) error {
	return c.post(ctx, "/v1/versions/restore-deleted", req, out)
}

// Undo is POST /v1/undo/{id}; out is the daemon's UndoResult.
func (c *Client) Undo(ctx context.Context, id int64, force, dryRun bool, out any) error {
	return c.Do(ctx, "POST", fmt.Sprintf("/v1/undo/%d?force=%t&dry_run=%t", id, force, dryRun), nil, out)
}

// Redo is POST /v1/redo/{id}.
func (c *Client) Redo(ctx context.Context, id int64) (RedoResult, error) {
	var out RedoResult
	return out, c.Do(ctx, "POST", fmt.Sprintf("/v1/redo/%d", id), nil, &out)
}

// Trigger is POST /v1/trigger: an evaluation of a store's roots (or one).
func (c *Client) Trigger(ctx context.Context, store, root string, out any) error {
	return c.post(ctx, "/v1/trigger", struct {
		Store string `json:"store"`
		Root  string `json:"root,omitempty"`
	}{store, root}, out)
}

// Compact is POST /v1/compact (a CompactRequest of the daemon).
func (c *Client) Compact(ctx context.Context, req, out any) error {
	return c.post(ctx, "/v1/compact", req, out)
}

func (c *Client) post(ctx context.Context, path string, req, out any) error {
	return c.DoJSON(ctx, "POST", path, req, out)
}

// DoJSON is Do with body (nil: none) sent as JSON.
func (c *Client) DoJSON(ctx context.Context, method, path string, body, out any) error {
	if body == nil {
		return c.Do(ctx, method, path, nil, out)
	}
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	return c.Do(ctx, method, path, bytes.NewReader(b), out)
}

// Do sends a request and decodes a JSON answer into out. Nothing
// answering is ErrNoDaemon; an answer of another policy's daemon too; a
// refusal is a *RemoteError (a 400 wraps ErrUsage, a 404 ErrNotFound).
func (c *Client) Do(ctx context.Context, method, path string, body io.Reader, out any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, requestTimeout)
		defer cancel()
	}
	conn, err := Dial(ctx, c.Socket)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("%w (no answer on %s; if it runs with another --state-dir or policy, give the same, or set MEMWATCH_STATE_DIR)", ErrNoDaemon, c.Socket)
		}
		return fmt.Errorf("control socket %s: %w", c.Socket, err)
	}
	defer conn.Close()
	// A context that ends ends the exchange: its reads and writes fail.
	defer context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })()
	resp, err := roundTrip(conn, method, path, body)
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("control socket %s: %s %s: %w", c.Socket, method, path, err)
	}
	if got := resp.header.Get(PolicyHeader); c.policy != "" && got != "" && got != c.policy {
		return fmt.Errorf("%w: the daemon on %s runs the policy %s, not %s (give --policy, or start memwatch with this one)", ErrNoDaemon, c.Socket, got, c.policy)
	}
	if got := resp.header.Get(PolicyStampHeader); c.stamp != "" && got != "" && got != c.stamp {
		return fmt.Errorf("%w: the policy files changed since the daemon loaded them", ErrNoDaemon)
	}
	if resp.status >= 300 {
		var e struct {
			Error string `json:"error"`
			Code  string `json:"code"`
		}
		_ = json.NewDecoder(resp.body).Decode(&e)
		if e.Error == "" {
			e.Error = resp.statusLine
		}
		return &RemoteError{Status: resp.status, Msg: e.Error, Code: e.Code}
	}
	if out == nil {
		return nil
	}
	if r, ok := out.(*RecallResponse); ok {
		return c.readRecall(ctx, method, path, resp.body, r)
	}
	if err := json.NewDecoder(resp.body).Decode(out); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("control socket %s: %s %s: read the answer: %w", c.Socket, method, path, err)
	}
	return nil
}

// maxFastRecall bounds the answer readRecall reads whole: the daemon's
// answers are cut at MaxAnswer bytes of text, which JSON escapes grow.
const maxFastRecall = 4 * MaxAnswer

// readRecall reads a recall answer with decodeRecall, else (an answer it
// does not read, or a long one) with encoding/json, as Do reads others.
func (c *Client) readRecall(ctx context.Context, method, path string, body io.Reader, out *RecallResponse) error {
	b, err := io.ReadAll(io.LimitReader(body, maxFastRecall))
	if err == nil && len(b) < maxFastRecall && decodeRecall(b, out) == nil {
		return nil
	}
	*out = RecallResponse{}
	if err == nil {
		err = json.NewDecoder(io.MultiReader(bytes.NewReader(b), body)).Decode(out)
	}
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("control socket %s: %s %s: read the answer: %w", c.Socket, method, path, err)
	}
	return nil
}

// answer is the daemon's answer to one request.
type answer struct {
	status     int
	statusLine string // "404 Not Found"
	header     textproto.MIMEHeader
	body       io.Reader
}

// maxAnswerHead bounds an answer's status line and headers.
const maxAnswerHead = 64 << 10

// headLimit reads at most left bytes from r, while left is not negative.
type headLimit struct {
	r    io.Reader
	left int64
}

func (l *headLimit) Read(p []byte) (int, error) {
	if l.left < 0 {
		return l.r.Read(p)
	}
	if l.left == 0 {
		return 0, fmt.Errorf("an answer's headers longer than %d KiB", maxAnswerHead>>10)
	}
	n, err := l.r.Read(p[:min(int64(len(p)), l.left)])
	l.left -= int64(n)
	return n, err
}

// roundTrip writes one HTTP/1.0 request for path (method, body as JSON)
// on conn and reads the answer's head (readAnswer).
func roundTrip(conn net.Conn, method, path string, body io.Reader) (*answer, error) {
	if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " \r\n") {
		return nil, fmt.Errorf("malformed request path %q", path)
	}
	var req bytes.Buffer
	req.WriteString(method + " " + path + " HTTP/1.0\r\nHost: memwatch\r\n")
	if body != nil {
		b, err := io.ReadAll(body)
		if err != nil {
			return nil, err
		}
		req.WriteString("Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(b)) + "\r\n\r\n")
		req.Write(b)
	} else {
		req.WriteString("\r\n")
	}
	if _, err := conn.Write(req.Bytes()); err != nil {
		return nil, err
	}
	return readAnswer(conn)
}

// readAnswer reads an answer's head from r; its body is what follows.
func readAnswer(r io.Reader) (*answer, error) {
	lim := &headLimit{r: r, left: maxAnswerHead}
	br := bufio.NewReader(lim)
	tp := textproto.NewReader(br)
	line, err := tp.ReadLine()
	if err != nil {
		return nil, fmt.Errorf("read the answer: %w", err)
	}
	proto, statusLine, _ := strings.Cut(line, " ")
	code, _, _ := strings.Cut(statusLine, " ")
	status, err := strconv.Atoi(code)
	if proto != "HTTP/1.0" && proto != "HTTP/1.1" || len(code) != 3 || err != nil || status < 100 {
		return nil, fmt.Errorf("not an HTTP answer: %q", line)
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		return nil, fmt.Errorf("read the answer's headers: %w", err)
	}
	lim.left = -1 // the body is read by a decoder, which stops at its value's end
	a := &answer{status: status, statusLine: statusLine, header: h, body: br}
	if te := h.Get("Transfer-Encoding"); te != "" && te != "identity" {
		return nil, fmt.Errorf("an answer in transfer encoding %q to an HTTP/1.0 request", te)
	}
	if status < 200 || status == 204 || status == 304 {
		// Answers that carry no body, whatever their headers say (as
		// net/http reads them).
		a.body = strings.NewReader("")
		return a, nil
	}
	if cl := h.Get("Content-Length"); cl != "" {
		n, err := strconv.ParseInt(cl, 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("an answer of length %q", cl)
		}
		a.body = io.LimitReader(br, n)
	}
	return a, nil
}

// RemoteError is the daemon's answer to a request it refused: a 400 is
// the request's mistake (exit 2), a 404 something that is not there.
type RemoteError struct {
	Status int
	Msg    string
	Code   string // ErrorCode's, when the daemon gave one
}

func (e *RemoteError) Error() string { return e.Msg }

func (e *RemoteError) Unwrap() []error {
	var out []error
	switch e.Status {
	case 400:
		out = append(out, ErrUsage)
	case 404:
		out = append(out, ErrNotFound)
	}
	for _, c := range errorCodes {
		if c.code == e.Code {
			out = append(out, c.err)
		}
	}
	return out
}
