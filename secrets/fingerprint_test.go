package secrets

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateFindings = flag.Bool("update", false, "record the findings of testdata/findings.golden")

// TestFingerprintFollowsFindings: what the detector finds in a corpus of
// lines (each sample as written, inside a JSON line and as a .env a tool
// printed) is recorded with its Fingerprint; findings that change under
// the same fingerprint fail: a count kept from before would not be made
// again (bump readingGeneration, or the rules changed it already).
func TestFingerprintFollowsFindings(t *testing.T) {
	var corpus []string
	for _, s := range samples {
		res, _ := json.Marshal(map[string]any{"type": "user", "message": map[string]any{"content": []map[string]any{{"type": "tool_result", "content": "cat .env\n" + s.text + "\n"}}}})
		cfg, _ := json.Marshal(map[string]string{"setting": s.text})
		corpus = append(corpus, s.text, string(res), string(cfg), "\t"+strings.ReplaceAll(s.text, "=", "\t"))
	}
	d := Default()
	var b strings.Builder
	var buf []byte
	for i, l := range corpus {
		for _, f := range d.FindLine([]byte(l), &buf) {
			fmt.Fprintf(&b, "%d %s %d-%d\n", i, f.Rule, f.Start, f.End)
		}
	}
	got := b.String()
	path := filepath.Join("testdata", "findings.golden")
	data, err := os.ReadFile(path)
	if err != nil && !*updateFindings {
		t.Fatalf("%v (go test ./secrets -run %s -update records it)", err, t.Name())
	}
	fp, want, _ := strings.Cut(string(data), "\n")
	if got != want && fp == "fingerprint "+Fingerprint() {
		t.Fatalf("the findings changed under the same fingerprint %s: bump readingGeneration (secrets.go), then record them (-update)", Fingerprint())
	}
	if *updateFindings {
		if err := os.WriteFile(path, []byte("fingerprint "+Fingerprint()+"\n"+got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got != want || fp != "fingerprint "+Fingerprint() {
		t.Fatalf("the findings or the fingerprint changed: record them (go test ./secrets -run %s -update)", t.Name())
	}
}
