package background

import (
	"fmt"
	"testing"
)

// One root's 100,000 captures never make another root's wait for them.
func TestTaskQueueServesRootsInTurn(t *testing.T) {
	q := newTaskQueue()
	for i := range 100_000 {
		q.Push(Task{Kind: Capture, Root: "/big", Rel: fmt.Sprint(i)})
	}
	q.Push(Task{Kind: Index, Root: "/other", Rel: "MEMORY.md"})
	q.Push(Task{Kind: Capture, Root: "/other", Rel: "x.jsonl"})
	q.Push(Task{Kind: Capture, Root: "/other", Rel: "x.jsonl"}) // queued already
	var got []Task
	for range 4 {
		tk, _ := q.Pop()
		got = append(got, tk)
	}
	if got[0].Root != "/big" || got[1] != (Task{Kind: Capture, Root: "/other", Rel: "x.jsonl"}) || got[2].Root != "/big" || got[2].Rel != "1" || got[3].Rel != "2" {
		t.Errorf("served %v", got)
	}
	n := 4
	for {
		tk, ok := q.Pop()
		if !ok {
			break
		}
		n++
		if tk.Kind == Index && q.Len() != 0 {
			t.Errorf("an index task before %d captures", q.Len())
		}
	}
	if n != 100_002 || q.Len() != 0 {
		t.Errorf("served %d tasks, %d left; want 100,002 and none", n, q.Len())
	}
}
