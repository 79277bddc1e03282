package session

import (
	"encoding/binary"
	"regexp"
	"strings"
)

// memwatch's own traffic is not memory. Once an agent calls memwatch's
// MCP tools, its log holds the call (the query) and the result (the
// answer quoted back): captured and searched like the rest, they would
// rank first for the very question they answered, and more copies come
// with every use. So a call of one of memwatch's tools and what its
// recall tools return are left out of a message's text, as the agents
// spell them: Claude Code's mcp__memwatch__recall_memory, Codex's and
// others' memwatch__recall_memory or memwatch_recall_memory, or the bare
// recall_memory and recall_show. A message made of nothing else is meta:
// not searched, not consolidated.

// ownMark stands for a part of a message that was memwatch's own traffic
// until Decode takes it out.
const ownMark = "\x00memwatch\x00"

// ownTools are memwatch's MCP tools (mcpserver).
var ownTools = []string{"recall_memory", "recall_show", "memory_status", "memory_snapshot", "memory_stamp", "memory_list", "memory_read",
	"memory_write", "memory_append", "memory_patch", "history_search", "records_list", "records_context", "memory_changes",
	"memory_undo", "memory_versions", "memory_roots"}

// OwnTool reports whether a tool name is one of memwatch's MCP tools as an
// agent names it.
func OwnTool(name string) bool {
	n := strings.ToLower(name)
	for _, t := range ownTools {
		if n == t && (t == "recall_memory" || t == "recall_show") {
			return true
		}
		if prefix, ok := strings.CutSuffix(n, t); ok && strings.Contains(prefix, "memwatch") {
			return true
		}
	}
	return false
}

// ownResult matches what memwatch's recall tools return: recall_memory's
// and history_search's "Found N result(s) for: ..." with its citations,
// recall_show's "PATH (lines A to B; the cited ones marked >)".
var ownResult = regexp.MustCompile(`^(Found \d+ result\(s\) for: [^\n]*(\n|$)|[^\n]* \(lines \d+ to \d+; the cited ones marked >\)\n)`)

// OwnResult reports whether a tool's result is what memwatch's recall
// tools return.
func OwnResult(text string) bool {
	// What the expression must see, told first: it read a tool result's
	// whole first line (a long one in a command's output) at each message.
	t := strings.TrimSpace(text)
	first, _, _ := strings.Cut(t, "\n")
	if !strings.HasPrefix(t, "Found ") && !strings.HasSuffix(first, " the cited ones marked >)") {
		return false
	}
	return ownResult.MatchString(t)
}

// toolResult renders a tool's result in a message's text.
func toolResult(text string) string {
	if OwnResult(text) {
		return ownMark
	}
	return "[tool result] " + text
}

// withoutOwn takes memwatch's own traffic out of m's text; a message
// that held nothing else becomes meta.
func withoutOwn(m Message) Message {
	if !strings.Contains(m.Text, ownMark) {
		return m
	}
	var keep []string
	for _, part := range strings.Split(m.Text, "\n") {
		if p := strings.ReplaceAll(part, ownMark, ""); p != "" || part == "" {
			keep = append(keep, p)
		}
	}
	m.Text = strings.TrimSpace(strings.Join(keep, "\n"))
	if m.Text == "" {
		m.Meta, m.Role = true, ""
	}
	return m
}

// mayBeOwn reports whether a raw line could hold memwatch's own traffic
// (IsMessage then decodes it rather than trusting its shape): a tool's
// name holding memwatch or recall_memory/recall_show in any case (as
// OwnTool folds it), the marks OwnResult looks for, or an escape that could
// spell any of them. Four-byte windows, each folded as ASCII letters fold
// (a superset of a case-insensitive match), tried eight start positions
// at a time: every line captured is read through here (a home's lines
// at 940 MB/s, one window at a time 610).
func mayBeOwn(line []byte) bool {
	i := 0
	for ; i+11 <= len(line); i += 8 {
		// w0..w3: the bytes at i+k+0..3 for the eight starts k in lane k.
		w0 := binary.LittleEndian.Uint64(line[i:])
		w1 := binary.LittleEndian.Uint64(line[i+1:])
		w2 := binary.LittleEndian.Uint64(line[i+2:])
		w3 := binary.LittleEndian.Uint64(line[i+3:])
		// A backslash followed by u.
		if zeroBytes((w0^lane('\\'))|(w1^lane('u'))) != 0 {
			return true
		}
		f0, f1, f2, f3 := w0|laneFold, w1|laneFold, w2|laneFold, w3|laneFold
		// Each gram's misses, a zero byte where it matches: written
		// out (a loop over the five ran at 650 MB/s).
		g := &ownLanes
		m0 := (f0 ^ g[0][0]) | (f1 ^ g[0][1]) | (f2 ^ g[0][2]) | (f3 ^ g[0][3])
		m1 := (f0 ^ g[1][0]) | (f1 ^ g[1][1]) | (f2 ^ g[1][2]) | (f3 ^ g[1][3])
		m2 := (f0 ^ g[2][0]) | (f1 ^ g[2][1]) | (f2 ^ g[2][2]) | (f3 ^ g[2][3])
		m3 := (f0 ^ g[3][0]) | (f1 ^ g[3][1]) | (f2 ^ g[3][2]) | (f3 ^ g[3][3])
		m4 := (f0 ^ g[4][0]) | (f1 ^ g[4][1]) | (f2 ^ g[4][2]) | (f3 ^ g[4][3])
		if zeroBytes(m0)|zeroBytes(m1)|zeroBytes(m2)|zeroBytes(m3)|zeroBytes(m4) != 0 {
			return true
		}
	}
	return mayBeOwnFrom(line, i)
}

// mayBeOwnFrom is mayBeOwn one window at a time, for the starts from i
// on (the few the eight-at-a-time loop leaves at a line's end).
func mayBeOwnFrom(line []byte, i int) bool {
	memw, lme, lsh, found, cited := ownGrams[0], ownGrams[1], ownGrams[2], ownGrams[3], ownGrams[4]
	for ; i+4 <= len(line); i++ {
		w := binary.LittleEndian.Uint32(line[i:])
		if uint16(w) == '\\'|'u'<<8 {
			return true
		}
		switch w | asciiFold {
		case memw, lme, lsh, found, cited:
			return true
		}
	}
	for ; i+2 <= len(line); i++ {
		if line[i] == '\\' && line[i+1] == 'u' {
			return true
		}
	}
	return false
}

// zeroBytes is not zero when a byte of x is (exactly: the borrow that
// could mark a byte wrongly only follows a zero byte below it).
func zeroBytes(x uint64) uint64 { return (x - 0x0101010101010101) &^ x & 0x8080808080808080 }

// lane is c in each byte of a word.
func lane(c byte) uint64 { return uint64(c) * 0x0101010101010101 }

const laneFold = 0x2020202020202020

// ownLanes are ownGrams' bytes, each in every lane of a word:
// ownLanes[g][j] is byte j of gram g, folded. mayBeOwn writes out five:
// the index below fails to compile for another count.
var _ = [1]struct{}{}[len(ownGrams)-5]

var ownLanes = func() (l [len(ownGrams)][4]uint64) {
	for g, gram := range ownGrams {
		for j := range 4 {
			l[g][j] = lane(byte(gram >> (8 * j)))
		}
	}
	return l
}()

const asciiFold = 0x20202020

// ownGrams are mayBeOwn's windows: memwatch, recall_memory, recall_show,
// result(s) for:, the cited ones marked >.
var ownGrams = func() (g [5]uint32) {
	for i, s := range []string{"memw", "l_me", "l_sh", "(s) ", "ed >"} {
		g[i] = binary.LittleEndian.Uint32([]byte(s)) | asciiFold
	}
	return g
}()
