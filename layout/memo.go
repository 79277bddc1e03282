package layout

import "sync"

// maxMemo bounds what a Memo holds; past it, it starts afresh.
const maxMemo = 10_000

// Memo is what rules remember of roots between evaluations, in memory: a
// rule that parsed a file keeps what it found with the file's hash state
// (filesum), and parses only what was appended since. It is lost on
// restart and bounded (the rule then reads whole once). Safe for
// concurrent use; a nil Memo remembers nothing.
type Memo struct {
	mu sync.Mutex
	m  map[string]any
}

// Get returns what was put under root and key, or nil.
func (m *Memo) Get(root, key string) any {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.m[root+"\x00"+key]
}

// Put remembers v under root and key (nil forgets).
func (m *Memo) Put(root, key string, v any) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil || len(m.m) >= maxMemo {
		m.m = map[string]any{}
	}
	if v == nil {
		delete(m.m, root+"\x00"+key)
		return
	}
	m.m[root+"\x00"+key] = v
}
