package fleet

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/superfly/ltx"
)

// TestDue: a database is asked for new changes every interval while its
// host changes, every second interval once quiet for a minute, the
// journal every sixth.
func TestDue(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		journal bool
		found   time.Duration // the last change, before t0
		asks    []time.Duration
		want    []bool
	}{
		// Litestream asks at each tick of the interval (a little late at
		// times); an ask much sooner is not one.
		{"changing", false, 0, []time.Duration{0, time.Second, 5 * time.Second, 10100 * time.Millisecond, 15 * time.Second}, []bool{true, false, true, true, true}},
		{"quiet", false, 2 * time.Minute, []time.Duration{0, 5 * time.Second, 10 * time.Second, 15 * time.Second, 20100 * time.Millisecond}, []bool{true, false, true, false, true}},
		{"journal", true, 0, []time.Duration{0, 5 * time.Second, 25 * time.Second, 30 * time.Second}, []bool{true, false, false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &appliedClient{interval: 5 * time.Second, journal: tc.journal, found: t0.Add(-tc.found)}
			for i, at := range tc.asks {
				if got := c.due(t0.Add(at)); got != tc.want[i] {
					t.Errorf("asked at +%v: due %v, want %v", at, got, tc.want[i])
				}
			}
		})
	}
}

// fakeReplica counts the listings asked of the bucket.
type fakeReplica struct {
	litestream.ReplicaClient
	calls map[int]int
	l0    []*ltx.FileInfo
}

func (f *fakeReplica) LTXFiles(_ context.Context, level int, _ ltx.TXID, _ bool) (ltx.FileIterator, error) {
	f.calls[level]++
	if level == 0 {
		return ltx.NewFileInfoSliceIterator(f.l0), nil
	}
	return ltx.NewFileInfoSliceIterator(nil), nil
}

// TestQuietPollsAskNothing: between two due polls, Litestream's follow
// mode gets "nothing new" without a listing, and its gap listings of the
// compaction levels are not asked either; a real answer with nothing new
// asks them once, then they are kept; changes that do not follow on ask
// them again.
func TestQuietPollsAskNothing(t *testing.T) {
	out := filepath.Join(t.TempDir(), "spool.db")
	os.WriteFile(out, []byte("x"), 0o600)
	f := &fakeReplica{calls: map[int]int{}}
	c := &appliedClient{ReplicaClient: f, out: out, interval: time.Hour, higherFor: time.Hour}
	ctx := context.Background()
	list := func(level int, seek ltx.TXID) {
		itr, err := c.LTXFiles(ctx, level, seek, false)
		if err != nil {
			t.Fatal(err)
		}
		itr.Close()
	}
	list(0, 5) // due: asked
	list(1, 0) // the gap listing after nothing new: asked once
	list(0, 5) // not due: nothing asked
	list(1, 0)
	list(2, 0)
	if f.calls[0] != 1 || f.calls[1] != 1 || f.calls[2] != 0 {
		t.Fatalf("listings asked: %v, want level 0 once, level 1 once", f.calls)
	}
	// A change that does not follow on (a gap): the levels are asked again.
	c.lastPoll = time.Time{}
	f.l0 = []*ltx.FileInfo{{Level: 0, MinTXID: 9, MaxTXID: 9}}
	list(0, 5)
	list(1, 0)
	if f.calls[0] != 2 || f.calls[1] != 2 {
		t.Fatalf("after a gap: listings asked %v, want level 0 and level 1 twice", f.calls)
	}
}
