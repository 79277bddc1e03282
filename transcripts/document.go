package transcripts

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/memwatch/memwatch/spool"
)

// Some agents keep a conversation as one JSON document they write whole on
// every change (Continue CLI's sessions/<id>.json): no line is appended,
// no row added, and the document may shrink (a compaction replaces the
// history with its summary). A Document format turns one into its
// messages, in order; DocState remembers what was captured of it, so that
// only the messages after the longest unchanged prefix become records.
//
// Each message is identified by a chain hash: of itself and of every
// message before it. The same message at the same place of the same
// conversation keeps its id (records carry it as "id", so a message
// captured twice, should memwatch be killed between capturing and
// remembering, is shown once); the same words after a compaction are a
// new message.

// Document is one agent's transcript kept as a JSON document.
type Document struct {
	Name string
	// Messages parses a document: its session id and its messages, in
	// order, each a JSON object as session.Decode reads it (Changes sets
	// its "id"); ok is false when doc is not this agent's (or
	// is being written: the agent rewrites it in place).
	Messages func(doc []byte) (session string, msgs []map[string]any, ok bool)
}

// Documents are the JSON documents memwatch reads.
var Documents = []*Document{continueCLI, clineCLI}

// ParseDocument returns the format, session id and messages of doc; f is
// nil when no format reads it.
func ParseDocument(doc []byte) (f *Document, session string, msgs []map[string]any) {
	for _, f := range Documents {
		if s, m, ok := f.Messages(doc); ok {
			return f, s, m
		}
	}
	return nil, "", nil
}

// DocState is what was captured of a document: the chain hash of each
// message, in order.
type DocState struct {
	Sums []uint64
}

// errDocState is a stored state memwatch did not write.
var errDocState = errors.New("not a document state")

// MarshalBinary encodes the state: 8 bytes a message.
func (st DocState) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, 8*len(st.Sums))
	for _, s := range st.Sums {
		b = binary.LittleEndian.AppendUint64(b, s)
	}
	return b, nil
}

// UnmarshalBinary decodes what MarshalBinary encoded.
func (st *DocState) UnmarshalBinary(b []byte) error {
	if len(b)%8 != 0 {
		return fmt.Errorf("decode document state: %w (%d bytes)", errDocState, len(b))
	}
	st.Sums = make([]uint64, len(b)/8)
	for i := range st.Sums {
		st.Sums[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return nil
}

// Changes returns the records of the messages of a document not captured
// in st (those after the longest prefix it has unchanged), keyed from
// after+1 (after is the log's cursor), each with its id and, when it has
// none, the time the document was written; and the state for the document
// as it is now.
func (st DocState) Changes(session string, msgs []map[string]any, after int64, written time.Time) ([]spool.Record, DocState) {
	sums := make([]uint64, len(msgs))
	lines := make([][]byte, len(msgs))
	var prev uint64
	for i, m := range msgs {
		lines[i] = marshal(m)
		d := xxhash.New()
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], prev)
		d.Write(b[:])
		d.Write(lines[i])
		prev = d.Sum64()
		sums[i] = prev
	}
	same := 0
	for same < len(sums) && same < len(st.Sums) && sums[same] == st.Sums[same] {
		same++
	}
	var out []spool.Record
	for i := same; i < len(msgs); i++ {
		m := make(map[string]any, len(msgs[i])+2)
		for k, v := range msgs[i] {
			m[k] = v
		}
		// The id is the log's (recall tells messages apart within a log);
		// the time to the second: a record is kept for years.
		m["id"] = fmt.Sprintf("%016x", sums[i])
		if _, ok := m["timestamp"]; !ok && !written.IsZero() {
			m["timestamp"] = written.UTC().Format(time.RFC3339)
		}
		after++
		out = append(out, spool.Record{Key: after, Data: marshal(m)})
	}
	return out, DocState{Sums: sums}
}
