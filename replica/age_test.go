package replica

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"io"
	"testing"

	"filippo.io/age"
)

// TestPlainSizeOfAgeFiles: the plaintext size Litestream reads an object
// by follows from its encrypted size and header, at every chunk boundary.
func TestPlainSizeOfAgeFiles(t *testing.T) {
	a, _ := age.GenerateX25519Identity()
	b, _ := age.GenerateX25519Identity()
	for _, n := range []int{0, 1, 100, 64<<10 - 1, 64 << 10, 64<<10 + 1, 3 * 64 << 10, 3*64<<10 + 17, 1 << 20} {
		for _, rs := range [][]age.Recipient{{a.Recipient()}, {a.Recipient(), b.Recipient()}} {
			var enc bytes.Buffer
			w, err := age.Encrypt(&enc, rs...)
			if err != nil {
				t.Fatal(err)
			}
			plain := make([]byte, n)
			rand.Read(plain)
			w.Write(plain)
			w.Close()
			hdr, err := age.ExtractHeader(bufio.NewReader(bytes.NewReader(enc.Bytes())))
			if err != nil {
				t.Fatal(err)
			}
			if got := plainOf(int64(enc.Len() - len(hdr))); got != int64(n) {
				t.Errorf("%d bytes to %d recipients: plainOf = %d", n, len(rs), got)
			}
			r, err := age.Decrypt(bytes.NewReader(enc.Bytes()), b)
			if len(rs) == 2 {
				if err != nil {
					t.Fatal(err)
				}
				if got, _ := io.ReadAll(r); !bytes.Equal(got, plain) {
					t.Errorf("%d bytes do not decrypt back", n)
				}
			}
		}
	}
}
