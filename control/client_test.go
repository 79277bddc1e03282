package control

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// serve runs h, net/http's server as the daemon's is, on a unix socket in
// a temporary directory, and returns a client of it.
func serve(t *testing.T, h http.Handler) *Client {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "memwatch.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(l) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return NewClient(socket)
}

func TestClientDo(t *testing.T) {
	big := strings.Repeat("x", 200<<10) // past the server's buffer: streamed, no length
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/small", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]string{"q": r.URL.Query().Get("q")})
	})
	mux.HandleFunc("GET /v1/big", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]string{"text": big})
	})
	mux.HandleFunc("POST /v1/echo", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "no JSON", 400)
			return
		}
		io.Copy(w, r.Body)
	})
	mux.HandleFunc("GET /v1/refused", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(400)
		json.NewEncoder(w).Encode(map[string]string{"error": "no such scope", "code": "not_a_root"})
	})
	mux.HandleFunc("GET /v1/plain404", func(w http.ResponseWriter, r *http.Request) {
		http.NotFound(w, r)
	})
	mux.HandleFunc("GET /v1/other-policy", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(PolicyHeader, "theirs")
		w.Write([]byte("{}"))
	})
	c := serve(t, mux)
	ctx := context.Background()

	var small map[string]string
	if err := c.Do(ctx, "GET", "/v1/small?q=a%20b", nil, &small); err != nil || small["q"] != "a b" {
		t.Errorf("small: got %v, %v, want q=%q", small, err, "a b")
	}
	var large map[string]string
	if err := c.Do(ctx, "GET", "/v1/big", nil, &large); err != nil || large["text"] != big {
		t.Errorf("big: got %d bytes, %v, want %d", len(large["text"]), err, len(big))
	}
	var echo map[string]int
	if err := c.DoJSON(ctx, "POST", "/v1/echo", map[string]int{"n": 7}, &echo); err != nil || echo["n"] != 7 {
		t.Errorf("echo: got %v, %v, want n=7", echo, err)
	}
	err := c.Do(ctx, "GET", "/v1/refused", nil, nil)
	var re *RemoteError
	if !errors.As(err, &re) || re.Status != 400 || re.Msg != "no such scope" || !errors.Is(err, ErrUsage) || !errors.Is(err, ErrNotARoot) {
		t.Errorf("refused: got %v, want a 400 RemoteError wrapping ErrUsage and ErrNotARoot", err)
	}
	if err := c.Do(ctx, "GET", "/v1/plain404", nil, nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("404: got %v, want ErrNotFound", err)
	}
	c.Expect("ours", "")
	if err := c.Do(ctx, "GET", "/v1/other-policy", nil, nil); !errors.Is(err, ErrNoDaemon) {
		t.Errorf("another policy's daemon: got %v, want ErrNoDaemon", err)
	}
	for _, bad := range []string{"v1/small", "/v1/small x", "/v1/small\r\nX: y"} {
		if err := c.Do(ctx, "GET", bad, nil, nil); err == nil {
			t.Errorf("path %q: no error", bad)
		}
	}
}

func TestClientNoDaemon(t *testing.T) {
	c := NewClient(filepath.Join(t.TempDir(), "none.sock"))
	if err := c.Do(context.Background(), "GET", "/healthz", nil, nil); !errors.Is(err, ErrNoDaemon) {
		t.Errorf("got %v, want ErrNoDaemon", err)
	}
}

func TestClientContextEnds(t *testing.T) {
	release := make(chan struct{})
	c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.Do(ctx, "GET", "/slow", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want context.DeadlineExceeded", err)
	}
}

func TestReadAnswer(t *testing.T) {
	cases := []struct {
		name, in string
		status   int
		body     string
		ok       bool
	}{
		{"length", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}trailing", 200, "{}", true},
		{"to the end", "HTTP/1.0 404 Not Found\r\nConnection: close\r\n\r\nnot here", 404, "not here", true},
		{"no headers", "HTTP/1.1 204 No Content\r\n\r\n", 204, "", true},
		{"not HTTP", "SSH-2.0-OpenSSH\r\n\r\n", 0, "", false},
		{"bad status", "HTTP/1.1 2000 OK\r\n\r\n", 0, "", false},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", 0, "", false},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 0, "", false},
		{"cut", "HTTP/1.1 200 OK\r\nContent-", 0, "", false},
		{"huge head", "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", 70<<10) + "\r\n\r\n", 0, "", false},
	}
	for _, c := range cases {
		a, err := readAnswer(strings.NewReader(c.in))
		if (err == nil) != c.ok {
			t.Errorf("%s: got error %v, want ok %v", c.name, err, c.ok)
			continue
		}
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(a.body)
		if a.status != c.status || string(body) != c.body {
			t.Errorf("%s: got %d %q, want %d %q", c.name, a.status, body, c.status, c.body)
		}
	}
}

// FuzzReadAnswer holds readAnswer to net/http's reading of the same bytes
// where both take them: the same status, and the same body when a length
// bounds it.
func FuzzReadAnswer(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"))
	f.Add([]byte("HTTP/1.0 500 Internal Server Error\r\n\r\n{\"error\":\"x\"}"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nX-Memwatch-Policy: a\r\n b\r\n\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		a, err := readAnswer(bytes.NewReader(in))
		if err != nil {
			return
		}
		body, _ := io.ReadAll(a.body)
		if a.status < 100 || a.status > 999 || len(body) > len(in) {
			t.Fatalf("status %d, %d bytes of body, taken from %q", a.status, len(body), in)
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(in)), nil)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != a.status {
			t.Fatalf("status %d, net/http's %d, of %q", a.status, resp.StatusCode, in)
		}
		if a.header.Get("Content-Length") != "" {
			want, err := io.ReadAll(resp.Body)
			if err == nil && !bytes.Equal(body, want) {
				t.Fatalf("body %q, net/http's %q, of %q", body, want, in)
			}
		}
	})
}

// A full listen queue refuses a unix connect at once with EAGAIN; Dial
// waits it out while the daemon accepts, and gives up with its context.
func TestDialWaitsOutAFullQueue(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "memwatch.sock")
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: socket}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	l, err := net.FileListener(os.NewFile(uintptr(fd), socket))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var queued []net.Conn
	defer func() {
		for _, c := range queued {
			c.Close()
		}
	}()
	for {
		c, err := net.Dial("unix", socket)
		if errors.Is(err, syscall.EAGAIN) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if queued = append(queued, c); len(queued) > 100 {
			t.Skip("this kernel queues past the backlog")
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err = Dial(ctx, socket)
	cancel()
	if !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("Dial with a full queue and a context of 100 ms: %v, want EAGAIN", err)
	}

	dialled := make(chan error, 1)
	go func() {
		c, err := Dial(context.Background(), socket)
		if err == nil {
			c.Close()
		}
		dialled <- err
	}()
	// The daemon gets to its queue a moment later: Dial is answered.
	go func() {
		time.Sleep(50 * time.Millisecond)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if err := <-dialled; err != nil {
		t.Errorf("Dial while the queue drains: %v", err)
	}
}
