package spool

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Packs: the text of captured lines is kept compressed, a run of a log's
// consecutive lines in one zstd block (as Lucene and tantivy keep stored
// fields): transcripts repeat themselves from line to line (the same
// source file read twice, the same command's output), which a line alone
// does not show its compressor. A line is read by decompressing its one
// block, 128 KiB of text at most but for a longer line alone.
//
// A line's row keeps everything but its text (hash, size, times: the
// spool's identity and lineage work from them); its data is an empty blob
// and pack names the block, by the sequence number of the block's first
// line. A line still inline (pack 0) has its text in data: the tail of a
// log being written line by line goes inline until there is enough of it
// to pack (Pack), and so does every line of a state directory written
// before packs (converted by Pack, a block per transaction).
const packSchema = `
CREATE TABLE IF NOT EXISTS packs (
	log   INTEGER NOT NULL,
	first INTEGER NOT NULL, -- seq of its first line
	last  INTEGER NOT NULL, -- and of its last
	data  BLOB NOT NULL,    -- zstd of each line's text after its uvarint length
	PRIMARY KEY (log, first)
) WITHOUT ROWID;
`

const (
	// packTarget is the text a block holds: big enough to find the
	// repeats of a session, small enough that reading a line is cheap
	// (256 KiB decompress in about a millisecond). At 128 KiB a home's
	// blocks compressed 1% worse and their last pages, half empty, were
	// 5% of the spool.
	packTarget = 256 << 10
	// packMin is the least text packed: a few appended lines stay inline
	// until the log has more (a small block compresses poorly).
	packMin = 16 << 10
	// packCacheSize is how many decoded blocks a spool keeps: a read of a
	// range or of a whole log meets each block many times in a row.
	packCacheSize = 8
	// packMinSQL is packMin as the partial index logs_inline states it.
	packMinSQL = "16384"
)

var (
	zenc, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1), zstd.WithLowerEncoderMem(true))
	zdec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxMemory(1<<30))
)

// packer gathers the text of consecutive lines into one block.
type packer struct {
	first, last int64
	n           int
	raw         []byte
	text        int64 // the lines' text alone
}

func (p *packer) add(seq int64, data []byte) {
	if p.n == 0 {
		p.first = seq
	}
	p.last = seq
	p.n++
	p.text += int64(len(data))
	p.raw = binary.AppendUvarint(p.raw, uint64(len(data)))
	p.raw = append(p.raw, data...)
}

func (p *packer) reset() { p.n, p.text, p.raw = 0, 0, p.raw[:0] }

// seal returns the block's compressed bytes, in dst's memory when it has
// room.
func (p *packer) seal(dst []byte) []byte {
	if cap(dst) < len(p.raw)/3 {
		dst = make([]byte, 0, len(p.raw)/3)
	}
	return zenc.EncodeAll(p.raw, dst[:0])
}

// packBuf is a capture's block buffers, kept from one capture to the next
// (packBufs): grown by doubling for each log, a home's catch-up allocated
// three times its logs' bytes in them.
type packBuf struct{ raw, z []byte }

var packBufs = sync.Pool{New: func() any {
	return &packBuf{raw: make([]byte, 0, packTarget+packTarget/4), z: make([]byte, 0, packTarget/2)}
}}

// maxPackBuf is the largest buffer put back into packBufs (a block with a
// line of a MiB is rare: its buffer goes).
const maxPackBuf = 2 * packTarget

// unpackBlock splits a block into its lines' texts, first to last.
func unpackBlock(z []byte, first, last int64) ([][]byte, error) {
	raw, err := zdec.DecodeAll(z, nil)
	if err != nil {
		return nil, fmt.Errorf("decompress spool block: %w", err)
	}
	out := make([][]byte, 0, last-first+1)
	for len(raw) > 0 {
		n, k := binary.Uvarint(raw)
		if k <= 0 || uint64(len(raw)-k) < n {
			return nil, errors.New("spool block is damaged")
		}
		out = append(out, raw[k:k+int(n):k+int(n)])
		raw = raw[k+int(n):]
	}
	if int64(len(out)) != last-first+1 {
		return nil, fmt.Errorf("spool block holds %d lines, want %d", len(out), last-first+1)
	}
	return out, nil
}

// blockCache keeps the last blocks read, decoded.
type blockCache struct {
	mu   sync.Mutex
	keys [packCacheSize][2]int64
	vals [packCacheSize][][]byte
	next int
}

func (c *blockCache) get(log, first int64) [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, k := range c.keys {
		if k == [2]int64{log, first} && c.vals[i] != nil {
			return c.vals[i]
		}
	}
	return nil
}

func (c *blockCache) put(log, first int64, lines [][]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keys[c.next], c.vals[c.next] = [2]int64{log, first}, lines
	c.next = (c.next + 1) % packCacheSize
}

// drop forgets the blocks of a log (they were rewritten or removed).
func (c *blockCache) drop(log int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, k := range c.keys {
		if k[0] == log {
			c.vals[i] = nil
		}
	}
}

// text returns a line's text from the row read of it: data itself for an
// inline line (or nil, pruned), else its block's part (a packed line's
// data is an empty blob, which reads as nil; pruning a line sets its pack
// back to 0). Blocks are read on the spool's reader, not the connection
// the row came from, which the caller's query still holds.
func (s *Spool) text(ctx context.Context, log, seq, pack int64, data []byte) ([]byte, error) {
	if pack == 0 {
		return data, nil
	}
	lines := s.blocks.get(log, pack)
	if lines == nil {
		var last int64
		var z []byte
		err := s.reader().QueryRowContext(ctx, `SELECT last, data FROM packs WHERE log=? AND first=?`, log, pack).Scan(&last, &z)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("spool line %d of log %d: its block is missing", seq, log)
		}
		if err != nil {
			return nil, fmt.Errorf("read spool block: %w", err)
		}
		if lines, err = unpackBlock(z, pack, last); err != nil {
			return nil, err
		}
		s.blocks.put(log, pack, lines)
	}
	i := seq - pack
	if i < 0 || i >= int64(len(lines)) {
		return nil, fmt.Errorf("spool line %d is not in its block %d of log %d", seq, pack, log)
	}
	return bytes.Clone(lines[i]), nil // the cache's copy stays as read
}

// reader is the connection pool blocks are read on: the writable spool's
// one connection may be held by the query whose rows need them.
func (s *Spool) reader() *sql.DB {
	if s.rdb != nil {
		return s.rdb
	}
	return s.db
}

// PackStats says what Pack did.
type PackStats struct {
	Logs, Lines, Blocks int64
	Bytes, Packed       int64 // text packed, and what its blocks take
	More                bool  // the budget ran out before every log was packed
}

// Pack compresses the inline text of logs that have packMin or more of
// it (lines appended one at a time, or a spool written before packs), at
// most budget bytes of text in one call: a block per transaction, so a
// kill at any instant leaves every line readable, inline or packed.
func (s *Spool) Pack(ctx context.Context, budget int64) (PackStats, error) {
	var st PackStats
	// By the partial index (spool.go): an idle spool of a million logs
	// costs a look at an empty index, not a scan of the logs.
	rows, err := s.db.QueryContext(ctx, `SELECT id FROM logs WHERE inline >= `+packMinSQL+` ORDER BY id`)
	if err != nil {
		return st, fmt.Errorf("pack spool: %w", err)
	}
	var logs []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return st, err
		}
		logs = append(logs, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return st, err
	}
	for _, log := range logs {
		if st.Bytes >= budget {
			st.More = true
			break
		}
		n, err := s.packLog(ctx, log, &st, budget)
		if err != nil {
			return st, err
		}
		if n > 0 {
			st.Logs++
		}
	}
	return st, nil
}

// packLog packs the inline lines of one log, a block per transaction,
// in runs of consecutive sequence numbers.
func (s *Spool) packLog(ctx context.Context, log int64, st *PackStats, budget int64) (int64, error) {
	var packed int64
	after := int64(0)
	for {
		if err := ctx.Err(); err != nil {
			return packed, err
		}
		if st.Bytes >= budget {
			st.More = true // a log of more than the budget: the rest next time
			return packed, nil
		}
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return packed, fmt.Errorf("pack spool: %w", err)
		}
		var p packer
		rows, err := tx.QueryContext(ctx, `SELECT seq, data FROM lines WHERE log=? AND seq>? AND pack=0 AND data IS NOT NULL ORDER BY seq`, log, after)
		if err != nil {
			tx.Rollback()
			return packed, fmt.Errorf("pack spool: %w", err)
		}
		for rows.Next() {
			var seq int64
			var data []byte
			if err := rows.Scan(&seq, &data); err != nil {
				rows.Close()
				tx.Rollback()
				return packed, err
			}
			if p.n > 0 && seq != p.last+1 {
				break // a gap (lines dropped by Prune): the run ends
			}
			p.add(seq, data)
			if len(p.raw) >= packTarget {
				break
			}
		}
		rows.Close()
		if p.n == 0 || (len(p.raw) < packMin && after > 0) {
			// Done, or a short run after the blocks: it waits for more.
			var rest int64
			if err := tx.QueryRowContext(ctx, `SELECT COALESCE(SUM(length(data)),0) FROM lines WHERE log=? AND pack=0 AND data IS NOT NULL`, log).Scan(&rest); err == nil {
				tx.ExecContext(ctx, `UPDATE logs SET inline=? WHERE id=?`, rest, log)
			}
			return packed, tx.Commit()
		}
		if err := writeBlock(ctx, tx, log, &p, true); err != nil {
			tx.Rollback()
			return packed, err
		}
		if err := tx.Commit(); err != nil {
			return packed, fmt.Errorf("pack spool: %w", err)
		}
		st.Lines += int64(p.n)
		st.Blocks++
		st.Bytes += int64(len(p.raw))
		packed += int64(p.n)
		after = p.last
	}
}

// writeBlock stores p's block and points its lines at it; wasInline says
// the lines were counted in the log's inline text.
func writeBlock(ctx context.Context, tx *sql.Tx, log int64, p *packer, wasInline bool) error {
	z := p.seal(nil)
	if _, err := tx.ExecContext(ctx, insertPack, log, p.first, p.last, z); err != nil {
		return fmt.Errorf("pack spool: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE lines SET data=X'', pack=? WHERE log=? AND seq BETWEEN ? AND ?`, p.first, log, p.first, p.last); err != nil {
		return fmt.Errorf("pack spool: %w", err)
	}
	if !wasInline {
		return nil
	}
	if _, err := tx.ExecContext(ctx, `UPDATE logs SET inline=MAX(0, inline-?) WHERE id=?`, p.text, log); err != nil {
		return fmt.Errorf("pack spool: %w", err)
	}
	return nil
}

// repack rewrites the blocks some of whose lines were pruned or removed
// (their text must not stay in the block) and deletes those left with
// none. It runs in the transaction that dropped them.
func (s *Spool) repack(ctx context.Context, tx *sql.Tx) error {
	type key struct{ log, first, last int64 }
	var touched []key
	rows, err := tx.QueryContext(ctx, `SELECT p.log, p.first, p.last FROM packs p WHERE
		(SELECT COUNT(*) FROM lines l WHERE l.log=p.log AND l.seq BETWEEN p.first AND p.last AND l.pack=p.first AND l.data IS NOT NULL) < p.last-p.first+1`)
	if err != nil {
		return fmt.Errorf("repack spool: %w", err)
	}
	for rows.Next() {
		var k key
		if err := rows.Scan(&k.log, &k.first, &k.last); err != nil {
			rows.Close()
			return err
		}
		touched = append(touched, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, k := range touched {
		s.blocks.drop(k.log)
		var z []byte
		if err := tx.QueryRowContext(ctx, `SELECT data FROM packs WHERE log=? AND first=?`, k.log, k.first).Scan(&z); err != nil {
			return fmt.Errorf("repack spool: %w", err)
		}
		kept := map[int64]bool{}
		rs, err := tx.QueryContext(ctx, `SELECT seq FROM lines WHERE log=? AND seq BETWEEN ? AND ? AND pack=? AND data IS NOT NULL`, k.log, k.first, k.last, k.first)
		if err != nil {
			return fmt.Errorf("repack spool: %w", err)
		}
		for rs.Next() {
			var seq int64
			rs.Scan(&seq)
			kept[seq] = true
		}
		rs.Close()
		if len(kept) == 0 {
			if _, err := tx.ExecContext(ctx, `DELETE FROM packs WHERE log=? AND first=?`, k.log, k.first); err != nil {
				return fmt.Errorf("repack spool: %w", err)
			}
			continue
		}
		lines, err := unpackBlock(z, k.first, k.last)
		if err != nil {
			return err
		}
		// The block keeps its range (rows point at its first line); a
		// dropped line's text becomes empty.
		var p packer
		for i, l := range lines {
			seq := k.first + int64(i)
			if !kept[seq] {
				l = nil
			}
			p.add(seq, l)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE packs SET data=? WHERE log=? AND first=?`, p.seal(nil), k.log, k.first); err != nil {
			return fmt.Errorf("repack spool: %w", err)
		}
	}
	_, err = tx.ExecContext(ctx, `UPDATE lines SET pack=0 WHERE pack>0 AND data IS NULL`)
	return err
}
