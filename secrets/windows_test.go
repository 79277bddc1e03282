package secrets

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// wholeDetector runs every rule on the whole text: what the windows must
// find exactly.
func wholeDetector(t testing.TB) *Detector {
	d, err := newDetector(true, gitleaksConfig, memwatchConfig)
	if err != nil {
		t.Fatal(err)
	}
	d.whole = true
	return d
}

// TestWindowsFindWhatTheWholeTextHolds: running a rule around its
// keywords first finds exactly what running it over the whole text does,
// credentials at a line's start, end, inside words, after a false start,
// in source code full of keywords.
func TestWindowsFindWhatTheWholeTextHolds(t *testing.T) {
	whole := wholeDetector(t)
	var texts []string
	for _, s := range samples {
		texts = append(texts, s.text, "x"+s.text, s.text+"x", "they said "+s.text+"; then", strings.Repeat("s.", 40)+s.text)
	}
	src, _ := os.ReadFile("secrets.go")
	texts = append(texts, strings.Split(string(src), "\n")...)
	texts = append(texts,
		"jwt eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c end",
		"theyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
		"vault s.Xk3Rv9QmZ2Tn8Wb5Yc4JvR7k here, as.Xk3Rv9QmZ2Tn8Wb5Yc4JvR7k not",
	)
	for _, text := range texts {
		got, want := Default().Find(text), whole.Find(text)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%.120q:\nwindows %+v\nwhole   %+v", text, got, want)
		}
	}
}

func FuzzWindows(f *testing.F) {
	for _, s := range samples {
		f.Add(s.text)
	}
	f.Add("s.Xk3Rv9QmZ2Tn8Wb5Yc4JvR7k")
	whole := wholeDetector(f)
	f.Fuzz(func(t *testing.T, text string) {
		if got, want := Default().Find(text), whole.Find(text); !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: windows %+v, whole %+v", text, got, want)
		}
	})
}
