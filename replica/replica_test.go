package replica

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/policy"
)

func cfg(endpoint string) *policy.Replicate {
	return &policy.Replicate{S3: policy.S3{URL: "s3://b/p", Bucket: "b", Prefix: "p", Endpoint: endpoint, Region: "us-east-1", ForcePathStyle: true},
		Retention: 72 * time.Hour, SyncInterval: time.Second}
}

// TestRedirectingEndpointIsRefused: requests signed for one host must not
// follow a redirect to another; memwatch runs on without replication and
// says why.
func TestRedirectingEndpointIsRefused(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the redirect was followed: %s %s", r.Method, r.URL)
	}))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	r, err := New(cfg(srv.URL), t.TempDir(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Run(ctx); err != nil {
		t.Fatalf("Run: %v, want nil (memwatch runs on)", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Run did not return on a refused endpoint")
	}
	if st := r.Status(); !strings.Contains(st.Refused, "redirects") {
		t.Errorf("status: refused %q, want the redirect named", st.Refused)
	}
}

func TestCredentials(t *testing.T) {
	dir := t.TempDir()
	good, open := filepath.Join(dir, "key"), filepath.Join(dir, "open")
	os.WriteFile(good, []byte("AKIA123\n"), 0o600)
	os.WriteFile(open, []byte("AKIA123\n"), 0o644)
	t.Setenv("MW_TEST_KEY", "AKIA-env")
	t.Setenv("MW_TEST_SECRET", "s3cr3t")
	tests := []struct {
		name            string
		c               policy.Replicate
		wantAK, wantErr string
	}{
		{"env", policy.Replicate{S3: policy.S3{AccessKeyEnv: "MW_TEST_KEY", SecretKeyEnv: "MW_TEST_SECRET"}}, "AKIA-env", ""},
		{"file", policy.Replicate{S3: policy.S3{AccessKeyFile: good, SecretKeyEnv: "MW_TEST_SECRET"}}, "AKIA123", ""},
		{"unset variable", policy.Replicate{S3: policy.S3{AccessKeyEnv: "MW_TEST_UNSET", SecretKeyEnv: "MW_TEST_SECRET"}}, "", "MW_TEST_UNSET, which is not set"},
		{"readable file", policy.Replicate{S3: policy.S3{AccessKeyFile: open, SecretKeyEnv: "MW_TEST_SECRET"}}, "", "readable by group or others"},
		{"none: the default chain", policy.Replicate{}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ak, _, err := Credentials(&tt.c)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err: got %v, want it to say %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || ak != tt.wantAK {
				t.Fatalf("got %q, %v; want %q", ak, err, tt.wantAK)
			}
		})
	}
}

// TestSecretsAreRedacted: an error of the SDK that quotes a credential is
// logged without it.
func TestSecretsAreRedacted(t *testing.T) {
	t.Setenv("MW_TEST_KEY", "AKIA-visible")
	t.Setenv("MW_TEST_SECRET", "very-secret-value")
	c := cfg("http://127.0.0.1:1")
	c.AccessKeyEnv, c.SecretKeyEnv = "MW_TEST_KEY", "MW_TEST_SECRET"
	r, err := New(c, t.TempDir(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	got := r.redact("signature for AKIA-visible with very-secret-value failed")
	if strings.Contains(got, "AKIA-visible") || strings.Contains(got, "very-secret-value") {
		t.Errorf("redact: %q", got)
	}
}

// TestRestoreRefusesAStateDirectory: a directory that holds anything is
// not overwritten without force.
func TestRestoreRefusesAStateDirectory(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "memwatch.db"), []byte("x"), 0o600)
	_, err := Restore(context.Background(), cfg("http://127.0.0.1:1"), dir, false, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("got %v, want a refusal", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "memwatch.db")); string(b) != "x" {
		t.Error("the database was touched")
	}
}
