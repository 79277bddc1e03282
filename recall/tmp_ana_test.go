package recall

import (
	"bytes"
	"os"
	"testing"

	"github.com/memwatch/memwatch/recall/analysis"
)

func loadTexts(b *testing.B) [][]byte {
	raw, err := os.ReadFile("/tmp/allhome.jsonl")
	if err != nil {
		b.Skip(err)
	}
	raw = raw[:80<<20]
	var out [][]byte
	for _, l := range bytes.Split(raw, []byte("\n")) {
		lt := decodeLineText(Log, l)
		if lt.doc >= 0 {
			out = append(out, lt.search[lt.doc:])
		}
	}
	return out
}

func BenchmarkTmpTermIDs(b *testing.B) {
	texts := loadTexts(b)
	var n int64
	for _, t := range texts {
		n += int64(len(t))
	}
	b.SetBytes(n)
	a := analysis.New()
	for b.Loop() {
		a.ResetIDs()
		k := 0
		for _, t := range texts {
			a.TermIDs(t, func(id int32) { k++ })
		}
	}
}
