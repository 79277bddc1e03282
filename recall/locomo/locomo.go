// Package locomo reads a long-conversation QA set in LoCoMo's format
// (Maharana et al., ACL 2024: conversations of dated sessions of turns,
// and questions with the turns that hold their answers) and writes its
// conversations as agents' memory, so recall's relevance is measured the
// same way by make bench-relevance (through the CLI) and by the recall
// package's TestLoCoMo (in the process).
package locomo

import (
	"archive/zip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Conversation is one of the set's conversations.
type Conversation struct {
	SpeakerA string
	Sessions [][]Turn
	Dates    []string // each session's date, as the set writes it
	QA       []Question
}

// Turn is one turn of a session.
type Turn struct {
	Speaker string `json:"speaker"`
	DiaID   string `json:"dia_id"`
	Text    string `json:"text"`
}

// Question is a question with its evidence (the turns' ids).
type Question struct {
	Question string          `json:"question"`
	Answer   json.RawMessage `json:"answer"`
	Evidence []string        `json:"evidence"`
	Category int             `json:"category"` // 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial
}

// Categories names the categories by number.
var Categories = []string{"", "multi-hop", "temporal", "open-domain", "single-hop"}

// Read reads a zip of the set's JSON files, or a directory of them.
func Read(path string) ([]Conversation, error) {
	var files [][]byte
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		ms, _ := filepath.Glob(filepath.Join(path, "*.json"))
		for _, m := range ms {
			b, err := os.ReadFile(m)
			if err != nil {
				return nil, err
			}
			files = append(files, b)
		}
	} else {
		z, err := zip.OpenReader(path)
		if err != nil {
			return nil, err
		}
		defer z.Close()
		var names []string
		byName := map[string]*zip.File{}
		for _, f := range z.File {
			if strings.HasSuffix(f.Name, ".json") && !strings.Contains(f.Name, "__MACOSX") {
				names = append(names, f.Name)
				byName[f.Name] = f
			}
		}
		sort.Strings(names)
		for _, n := range names {
			r, err := byName[n].Open()
			if err != nil {
				return nil, err
			}
			b, err := io.ReadAll(r)
			r.Close()
			if err != nil {
				return nil, err
			}
			files = append(files, b)
		}
	}
	var out []Conversation
	for _, b := range files {
		var raw map[string]json.RawMessage
		if json.Unmarshal(b, &raw) != nil {
			continue
		}
		var c Conversation
		json.Unmarshal(raw["speaker_a"], &c.SpeakerA)
		for k := 1; ; k++ {
			s, ok := raw[fmt.Sprintf("session_%d", k)]
			if !ok {
				break
			}
			var ts []Turn
			json.Unmarshal(s, &ts)
			var date string
			json.Unmarshal(raw[fmt.Sprintf("session_%d_date_time", k)], &date)
			c.Sessions, c.Dates = append(c.Sessions, ts), append(c.Dates, date)
		}
		json.Unmarshal(raw["qa"], &c.QA)
		if len(c.Sessions) > 0 && len(c.QA) > 0 {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no conversation in %s", path)
	}
	return out, nil
}

// Write writes the conversation as a memory-history root: a
// sessions/session_N.jsonl per session, a {"role", "content": "Speaker:
// text", "timestamp"} line per turn (the first speaker's turns as the
// user's, a minute apart from the session's date). It returns the turn id
// each citation names.
func (c Conversation) Write(root string) (map[string]string, error) {
	if err := os.MkdirAll(filepath.Join(root, "sessions"), 0o755); err != nil {
		return nil, err
	}
	where := map[string]string{}
	for k, ts := range c.Sessions {
		when := SessionDate(c.Dates[k])
		var b strings.Builder
		for i, t := range ts {
			role := "assistant"
			if t.Speaker == c.SpeakerA {
				role = "user"
			}
			line, _ := json.Marshal(map[string]string{"role": role, "content": t.Speaker + ": " + t.Text, "timestamp": when.Add(time.Duration(i) * time.Minute).Format(time.RFC3339)})
			b.Write(line)
			b.WriteByte('\n')
			where[fmt.Sprintf("sessions/session_%d.jsonl#L%d", k+1, i+1)] = t.DiaID
		}
		if err := os.WriteFile(filepath.Join(root, "sessions", fmt.Sprintf("session_%d.jsonl", k+1)), []byte(b.String()), 0o644); err != nil {
			return nil, err
		}
	}
	return where, nil
}

// SessionDate reads the set's "1:56 pm on 8 May, 2023" (1 January 2023
// when it cannot).
func SessionDate(s string) time.Time {
	if t, err := time.Parse("3:04 pm on 2 January, 2006", s); err == nil {
		return t
	}
	return time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC)
}

// Share is the share of a question's evidence turns in got.
func Share(evidence []string, got map[string]bool) float64 {
	hit := 0
	for _, e := range evidence {
		if got[strings.TrimSpace(e)] {
			hit++
		}
	}
	return float64(hit) / float64(len(evidence))
}
