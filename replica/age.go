package replica

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"filippo.io/age"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/s3/manager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/benbjohnson/litestream"
	lss3 "github.com/benbjohnson/litestream/s3"
	"github.com/superfly/ltx"

	"github.com/memwatch/memwatch/policy"
)

// Encryption: what replicate ships is encrypted with age
// (filippo.io/age) before it leaves the host, to the recipients of
// age_recipients_file: every object in the bucket is an age file, and the
// bucket's operator reads nothing of the agents' memory. The host adds a
// key of its own (HostKeyFile in the state directory, never replicated):
// Litestream reads back what it wrote to compact it. memwatch state
// restore and a fleet's central node open the objects with the identities
// of age_identity_file. Objects written before encryption was turned on
// are read as they are.

// HostKeyFile is the host's own age identity, in the state directory.
const HostKeyFile = "replica-age.key"

// ErrNoIdentity means the bucket's objects are encrypted and no identity
// to open them was given.
var ErrNoIdentity = errors.New("the bucket's objects are encrypted with age and no age_identity_file names an identity to open them")

// Keys are what a replica's objects are encrypted to and opened with.
type Keys struct {
	recipients []age.Recipient
	identities []age.Identity
}

// Encrypts reports whether objects written with these keys are encrypted.
func (k *Keys) Encrypts() bool { return k != nil && len(k.recipients) > 0 }

// LoadKeys reads the age files cfg names. A host that replicates (host
// true) encrypts to age_recipients_file and to its own key in stateDir,
// made on first use; a reader (restore, a central node) opens with
// age_identity_file. No recipients on a host: nil, the objects are
// written in the clear (memwatch validate warns of it).
func LoadKeys(cfg *policy.S3, stateDir string, host bool) (*Keys, error) {
	k := &Keys{}
	if cfg.AgeIdentityFile != "" {
		s, err := policy.ReadSecret(cfg.AgeIdentityFile, "age_identity_file")
		if err != nil {
			return nil, err
		}
		ids, err := age.ParseIdentities(strings.NewReader(s))
		if err != nil {
			return nil, fmt.Errorf("age_identity_file %s: %w", cfg.AgeIdentityFile, err)
		}
		k.identities = append(k.identities, ids...)
	}
	if !host {
		return k, nil
	}
	if cfg.AgeRecipientsFile == "" {
		return nil, nil
	}
	b, err := os.ReadFile(cfg.AgeRecipientsFile)
	if err != nil {
		return nil, fmt.Errorf("age_recipients_file: %w", err)
	}
	rs, err := age.ParseRecipients(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("age_recipients_file %s: %w", cfg.AgeRecipientsFile, err)
	}
	own, err := hostKey(stateDir)
	if err != nil {
		return nil, err
	}
	k.recipients = append(rs, own.Recipient())
	k.identities = append(k.identities, own)
	return k, nil
}

// hostKey reads the host's own identity, or makes it (0600, in the state
// directory, which is the service's alone).
func hostKey(dir string) (*age.X25519Identity, error) {
	p := filepath.Join(dir, HostKeyFile)
	if s, err := policy.ReadSecret(p, "the host's replica key"); err == nil {
		return age.ParseX25519Identity(s)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	id, err := age.GenerateX25519Identity()
	if err != nil {
		return nil, err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(id.String()+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("write the host's replica key: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("write the host's replica key: %w", err)
	}
	return id, nil
}

// ageMagic starts every age file.
const ageMagic = "age-encryption.org/v1"

// ageClient is the S3 replica client with the objects encrypted: it lists
// and deletes through Litestream's client, and writes and reads the
// objects itself, age in between.
type ageClient struct {
	*lss3.ReplicaClient
	keys *Keys
	cfg  *policy.Replicate
	ak   string
	sk   string

	mu       sync.Mutex // guards up and sizes
	up       *manager.Uploader
	sizes    map[[3]uint64]int64 // plaintext sizes by level and TXIDs
	initOnce sync.Once
	initErr  error
}

func newAgeClient(inner *lss3.ReplicaClient, cfg *policy.Replicate, ak, sk string, keys *Keys) *ageClient {
	return &ageClient{ReplicaClient: inner, keys: keys, cfg: cfg, ak: ak, sk: sk, sizes: map[[3]uint64]int64{}}
}

func sizeKey(level int, min, max ltx.TXID) [3]uint64 {
	return [3]uint64{uint64(level), uint64(min), uint64(max)}
}

// uploader is an S3 client of the same bucket, settings and credentials
// as Litestream's (whose own upload reads the LTX header of what it sends).
func (c *ageClient) uploader(ctx context.Context) (*manager.Uploader, error) {
	c.initOnce.Do(func() {
		opts := []func(*config.LoadOptions) error{config.WithRegion(c.cfg.Region)}
		if c.ak != "" && c.sk != "" {
			opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(c.ak, c.sk, "")))
		}
		acfg, err := config.LoadDefaultConfig(ctx, opts...)
		if err != nil {
			c.initErr = fmt.Errorf("s3: load aws config: %w", err)
			return
		}
		cl := s3.NewFromConfig(acfg, func(o *s3.Options) {
			o.UsePathStyle = c.cfg.ForcePathStyle
			if c.cfg.Endpoint != "" {
				o.BaseEndpoint = aws.String(c.cfg.Endpoint)
				// S3-compatible servers refuse aws-chunked checksums.
				o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
				o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
			}
		})
		c.up = manager.NewUploader(cl, func(u *manager.Uploader) {
			if c.cfg.Endpoint != "" {
				u.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
			}
		})
	})
	return c.up, c.initErr
}

// WriteLTXFile encrypts the LTX file as it uploads it.
func (c *ageClient) WriteLTXFile(ctx context.Context, level int, minTXID, maxTXID ltx.TXID, r io.Reader) (*ltx.FileInfo, error) {
	up, err := c.uploader(ctx)
	if err != nil {
		return nil, err
	}
	// The file's own time goes in the object's metadata, as Litestream
	// keeps it (a restore to a time reads it).
	br := bufio.NewReaderSize(r, 64<<10)
	head, err := br.Peek(ltx.HeaderSize)
	if err != nil {
		return nil, fmt.Errorf("replicate: read ltx header: %w", err)
	}
	var hdr ltx.Header
	if err := hdr.UnmarshalBinary(head); err != nil {
		return nil, fmt.Errorf("replicate: read ltx header: %w", err)
	}
	created := time.UnixMilli(hdr.Timestamp).UTC()
	pr, pw := io.Pipe()
	var n int64
	done := make(chan error, 1)
	go func() {
		w, err := age.Encrypt(pw, c.keys.recipients...)
		if err == nil {
			n, err = io.Copy(w, br)
			if cerr := w.Close(); err == nil {
				err = cerr
			}
		}
		pw.CloseWithError(err)
		done <- err
	}()
	key := c.Path + "/" + fmt.Sprintf("%04x/%s", level, ltx.FormatFilename(minTXID, maxTXID))
	_, uerr := up.Upload(ctx, &s3.PutObjectInput{
		Bucket:   aws.String(c.Bucket),
		Key:      aws.String(key),
		Body:     pr,
		Metadata: map[string]string{lss3.MetadataKeyTimestamp: created.Format(time.RFC3339Nano)},
	})
	pr.CloseWithError(errors.New("upload ended"))
	eerr := <-done
	if uerr != nil {
		return nil, fmt.Errorf("s3: upload %s: %w", key, uerr)
	}
	if eerr != nil {
		return nil, fmt.Errorf("replicate: encrypt %s: %w", key, eerr)
	}
	c.mu.Lock()
	c.sizes[sizeKey(level, minTXID, maxTXID)] = n
	c.mu.Unlock()
	return &ltx.FileInfo{Level: level, MinTXID: minTXID, MaxTXID: maxTXID, Size: n, CreatedAt: created}, nil
}

// OpenLTXFile reads an object and decrypts it (one written in the clear,
// before encryption was turned on, is read as it is).
func (c *ageClient) OpenLTXFile(ctx context.Context, level int, minTXID, maxTXID ltx.TXID, offset, size int64) (io.ReadCloser, error) {
	rc, err := c.ReplicaClient.OpenLTXFile(ctx, level, minTXID, maxTXID, 0, 0)
	if err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(rc, 64<<10)
	var r io.Reader = br
	if head, _ := br.Peek(len(ageMagic)); string(head) == ageMagic {
		if len(c.keys.identities) == 0 {
			rc.Close()
			return nil, ErrNoIdentity
		}
		if r, err = age.Decrypt(br, c.keys.identities...); err != nil {
			rc.Close()
			return nil, fmt.Errorf("replica: open %s of level %d: %w", ltx.FormatFilename(minTXID, maxTXID), level, err)
		}
	}
	if offset > 0 {
		if _, err := io.CopyN(io.Discard, r, offset); err != nil {
			rc.Close()
			return nil, err
		}
	}
	if size > 0 {
		r = io.LimitReader(r, size)
	}
	return struct {
		io.Reader
		io.Closer
	}{r, rc}, nil
}

// LTXFiles lists the objects with their plaintext sizes, which Litestream
// reads them by.
func (c *ageClient) LTXFiles(ctx context.Context, level int, seek ltx.TXID, useMetadata bool) (ltx.FileIterator, error) {
	it, err := c.ReplicaClient.LTXFiles(ctx, level, seek, useMetadata)
	if err != nil {
		return nil, err
	}
	return &plainSizes{FileIterator: it, c: c, ctx: ctx}, nil
}

type plainSizes struct {
	ltx.FileIterator
	c    *ageClient
	ctx  context.Context
	item *ltx.FileInfo
	err  error
}

func (p *plainSizes) Next() bool {
	if !p.FileIterator.Next() {
		return false
	}
	info := *p.FileIterator.Item()
	n, err := p.c.plainSize(p.ctx, &info)
	if err != nil {
		p.err = err
		return false
	}
	info.Size = n
	p.item = &info
	return true
}

func (p *plainSizes) Item() *ltx.FileInfo { return p.item }

func (p *plainSizes) Err() error {
	if p.err != nil {
		return p.err
	}
	return p.FileIterator.Err()
}

// plainSize is the size of an object's plaintext: an age file's header
// is read once (its length depends on its recipients), the rest follows
// from age's chunking.
func (c *ageClient) plainSize(ctx context.Context, info *ltx.FileInfo) (int64, error) {
	k := sizeKey(info.Level, info.MinTXID, info.MaxTXID)
	c.mu.Lock()
	n, ok := c.sizes[k]
	c.mu.Unlock()
	if ok {
		return n, nil
	}
	rc, err := c.ReplicaClient.OpenLTXFile(ctx, info.Level, info.MinTXID, info.MaxTXID, 0, 64<<10)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	br := bufio.NewReader(rc)
	if head, _ := br.Peek(len(ageMagic)); string(head) != ageMagic {
		n = info.Size // written in the clear
	} else {
		hdr, err := age.ExtractHeader(br)
		if err != nil {
			return 0, fmt.Errorf("replica: read the age header of %s: %w", ltx.FormatFilename(info.MinTXID, info.MaxTXID), err)
		}
		n = plainOf(info.Size - int64(len(hdr)))
	}
	c.mu.Lock()
	c.sizes[k] = n
	c.mu.Unlock()
	return n, nil
}

// plainOf is the plaintext size of an age payload of n bytes: a 16-byte
// nonce, then chunks of 64 KiB each with a 16-byte tag (at least one).
func plainOf(n int64) int64 {
	const chunk, tag = 64 << 10, 16
	p := n - 16
	if p < tag {
		return 0
	}
	k, r := p/(chunk+tag), p%(chunk+tag)
	if r == 0 {
		return k * chunk
	}
	return k*chunk + r - tag
}

var _ litestream.ReplicaClient = (*ageClient)(nil)
