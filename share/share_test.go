package share

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"
)

func TestSharesBoundEachClientAndAll(t *testing.T) {
	s := New(2, 3, 50*time.Millisecond, nil)
	ctx := context.Background()
	var releases []func()
	take := func(client string) bool {
		r, ok := s.Acquire(ctx, client)
		if ok {
			releases = append(releases, r)
		}
		return ok
	}
	for i, tc := range []struct {
		client string
		want   bool
	}{
		{"alice", true}, {"alice", true}, {"alice", false}, // her share: 2
		{"bob", true},    // the third of all
		{"carol", false}, // all 3 taken
	} {
		if got := take(tc.client); got != tc.want {
			t.Fatalf("step %d, %s: got %v, want %v", i, tc.client, got, tc.want)
		}
	}
	releases[0]()
	if !take("carol") {
		t.Fatal("carol after alice gave one back: refused")
	}
	// A client that leaves stops waiting at once.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	start := time.Now()
	if _, ok := s.Acquire(cctx, "alice"); ok || time.Since(start) > 40*time.Millisecond {
		t.Errorf("a cancelled request: ok %v after %v", ok, time.Since(start))
	}
	for _, r := range releases[1:] {
		r()
	}
	s.mu.Lock()
	left := len(s.clients)
	s.mu.Unlock()
	if left != 0 {
		t.Errorf("%d clients remembered after every slot came back, want 0", left)
	}
}

func TestConnLimitClosesPastTheBound(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	l := NewConnLimit(ul, 2, func(net.Conn) string { return "alice" }, &RefusalLog{every: time.Minute})
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	var clients []net.Conn
	for range 3 {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	held := []net.Conn{<-accepted, <-accepted}
	// The third was closed as it was accepted: its client reads EOF.
	clients[2].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := clients[2].Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the third connection: %v, want EOF (closed)", err)
	}
	// One given back: the next is accepted.
	held[0].Close()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case got := <-accepted:
		got.Close()
	case <-time.After(5 * time.Second):
		t.Error("a connection after one closed was not accepted")
	}
	held[1].Close()
}
