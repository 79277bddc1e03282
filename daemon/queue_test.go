package daemon

import (
	"fmt"
	"testing"
)

// One root's 100,000 captures never make another root's wait for them.
func TestTaskQueueServesRootsInTurn(t *testing.T) {
	q := newTaskQueue()
	for i := range 100_000 {
		q.Push(task{kind: taskCapture, root: "/big", rel: fmt.Sprint(i)})
	}
	q.Push(task{kind: taskIndex, root: "/other", rel: "MEMORY.md"})
	q.Push(task{kind: taskCapture, root: "/other", rel: "x.jsonl"})
	q.Push(task{kind: taskCapture, root: "/other", rel: "x.jsonl"}) // queued already
	var got []task
	for range 4 {
		tk, _ := q.Pop()
		got = append(got, tk)
	}
	if got[0].root != "/big" || got[1] != (task{kind: taskCapture, root: "/other", rel: "x.jsonl"}) || got[2].root != "/big" || got[2].rel != "1" || got[3].rel != "2" {
		t.Errorf("served %v", got)
	}
	n := 4
	for {
		tk, ok := q.Pop()
		if !ok {
			break
		}
		n++
		if tk.kind == taskIndex && q.Len() != 0 {
			t.Errorf("an index task before %d captures", q.Len())
		}
	}
	if n != 100_002 || q.Len() != 0 {
		t.Errorf("served %d tasks, %d left; want 100,002 and none", n, q.Len())
	}
}
