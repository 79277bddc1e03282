package state

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// What a rewrite wrote is kept with its journal record, so the record
// shows its diff for as long as the journal holds it, whatever the file
// became since (the pre-image is in the record's archive). It goes with
// the record (journal retention counts its bytes).

// MaxWritten bounds what is kept of one record: a compaction's output is
// bounded by its limit; a bigger file's change is left to its versions.
const MaxWritten = 4 << 20

// codecs holds what KeepWritten and Written compress with, made on first
// use: a zstd encoder and decoder hold buffers worth reusing, and both are
// safe for concurrent EncodeAll/DecodeAll.
type codecs struct {
	once sync.Once
	enc  *zstd.Encoder
	dec  *zstd.Decoder
	err  error
}

func (c *codecs) get() (*zstd.Encoder, *zstd.Decoder, error) {
	c.once.Do(func() {
		c.enc, c.err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithWindowSize(1<<20), zstd.WithEncoderConcurrency(1))
		if c.err == nil {
			c.dec, c.err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(2*MaxWritten))
		}
	})
	return c.enc, c.dec, c.err
}

func (c *codecs) close() {
	c.once.Do(func() {}) // none made after this
	if c.dec != nil {
		c.dec.Close()
	}
	if c.enc != nil {
		c.enc.Close()
	}
}

// KeepWritten keeps data as what record id wrote (nothing past MaxWritten).
func (d *DB) KeepWritten(ctx context.Context, id int64, data []byte) error {
	if id <= 0 || len(data) > MaxWritten {
		return nil
	}
	enc, _, err := d.codecs.get()
	if err != nil {
		return fmt.Errorf("keep what record %d wrote: %w", id, err)
	}
	_, err = d.db.ExecContext(ctx, `INSERT OR REPLACE INTO written(id, data) VALUES(?, ?)`, id, enc.EncodeAll(data, nil))
	if err != nil {
		return fmt.Errorf("keep what record %d wrote: %w", id, err)
	}
	return nil
}

// Written is what record id wrote, when it was kept (ok false otherwise).
func (d *DB) Written(ctx context.Context, id int64) (data []byte, ok bool, err error) {
	var z []byte
	err = d.db.QueryRowContext(ctx, `SELECT data FROM written WHERE id=?`, id).Scan(&z)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read what record %d wrote: %w", id, err)
	}
	_, dec, err := d.codecs.get()
	if err != nil {
		return nil, false, fmt.Errorf("read what record %d wrote: %w", id, err)
	}
	out, err := dec.DecodeAll(z, nil)
	if err != nil {
		return nil, false, fmt.Errorf("read what record %d wrote: %w", id, err)
	}
	return out, true, nil
}
