package memoryhistory

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/jobs"
	"github.com/memwatch/memwatch/layout"
)

// batchLogs bounds the logs one history entry of a batch covers: its
// marker cites each (a line or two of text per log).
const batchLogs = 64

// runBatch consolidates the logs an evaluation found with work together
// (layout.Batched): an agent that deletes 100,000 one-message logs at once
// gets a history entry per batchLogs of them, in one job, not 100,000
// jobs and entries. Each log is planned as alone (plan), so a batch
// consolidates exactly what single jobs would have, and a log with more
// to go (a long session past max_read) comes round again.
func runBatch(ctx context.Context, env *layout.Env, root *confine.Root) (jobs.Result, error) {
	if err := resolveBatch(ctx, env, root); err != nil {
		return jobs.Result{}, layout.Retryable(err)
	}
	for ctx.Err() == nil && !jobs.Stopping(ctx) {
		rels := env.Batches.Take(root, RuleConsolidate, batchLogs)
		if len(rels) == 0 {
			return jobs.Result{}, nil
		}
		var parts []*part
		for i, rel := range rels {
			log, err := env.CaptureLog(ctx, root, rel)
			if env.Refused(root, RuleConsolidate, rel, err) {
				continue
			}
			if err != nil {
				if env.StateError != nil && env.StateError(root, "the lines of "+root.Join(rel), err) {
					env.Batches.Add(root, RuleConsolidate, rels[i:]...)
					return jobs.Result{}, layout.Retryable(err)
				}
				continue // gone meanwhile and never captured: nothing to consolidate
			}
			end, why, err := plan(ctx, env, root, log)
			if err != nil {
				env.Batches.Add(root, RuleConsolidate, rels[i:]...)
				return jobs.Result{}, layout.Retryable(err)
			}
			if end > 0 {
				parts = append(parts, &part{log: log, end: end, why: why})
			}
		}
		if len(parts) <= layout.BatchOver {
			// A few logs: an entry each, as their own jobs would write.
			for i, p := range parts {
				if err := consolidateRange(ctx, env, root, p.log, p.end, p.why); err != nil {
					for _, q := range parts[i:] {
						env.Batches.Add(root, RuleConsolidate, q.log.Path)
					}
					return jobs.Result{}, layout.Retryable(err)
				}
				env.Batches.Add(root, RuleConsolidate, p.log.Path) // planned again: a long session's next range
			}
			continue
		}
		left, err := consolidate(ctx, env, root, parts)
		if err != nil {
			env.Batches.Add(root, RuleConsolidate, rels...)
			return jobs.Result{}, layout.Retryable(err)
		}
		for _, p := range left {
			env.Batches.Add(root, RuleConsolidate, p.log.Path)
		}
		for _, p := range parts {
			if p.next > p.done && p.next < p.end {
				env.Batches.Add(root, RuleConsolidate, p.log.Path) // the rest of a long range
			}
		}
	}
	return jobs.Result{}, ctx.Err()
}

// savedBatch is a batch written to the journal's store before its entry:
// the target and key of the entry, and each log's progress once written.
type savedBatch struct {
	Target  string          `json:"target"`
	Key     string          `json:"key"`
	Commits map[int64]int64 `json:"commits"`
}

const batchNS = "consolidate-batch"

// saveBatch records b for root (an empty one clears it).
func saveBatch(ctx context.Context, env *layout.Env, root *confine.Root, b savedBatch) error {
	var v []byte
	if b.Key != "" {
		var err error
		if v, err = json.Marshal(b); err != nil {
			return err
		}
	}
	if err := env.DB.Put(ctx, batchNS, root.ID().Key(), v); err != nil {
		return fmt.Errorf("record a consolidation batch: %w", err)
	}
	return nil
}

// resolveBatch settles a batch a killed memwatch left: written (its key is
// journaled, or its marker ends the history), its progress is committed;
// else it is forgotten, its logs' work found again by the evaluation.
func resolveBatch(ctx context.Context, env *layout.Env, root *confine.Root) error {
	v, ok, err := env.DB.Get(ctx, batchNS, root.ID().Key())
	if err != nil || !ok || len(v) == 0 {
		return err
	}
	var b savedBatch
	if err := json.Unmarshal(v, &b); err != nil || b.Key == "" {
		return saveBatch(ctx, env, root, savedBatch{})
	}
	written, err := env.DB.DoneKey(ctx, root.Path(), b.Target, b.Key)
	if err != nil {
		return err
	}
	if written || strings.Contains(string(fileEnd(root, b.Target)), b.Key+" ") {
		env.Log.Info("a batch consolidated before a restart; committing its progress", "root", root.Path(), "logs", len(b.Commits))
		if err := env.Spool.CommitMany(ctx, consumer, b.Commits); err != nil {
			return err
		}
	}
	return saveBatch(ctx, env, root, savedBatch{})
}

// batchFallback is the raw entry of a batch: memory-history's raw fallback
// (rawFallback) per conversation, each its last message, at most
// fallback_messages of them, then how many more the entry cites.
func batchFallback(env *layout.Env, parts []*part) string {
	n, width := OptionsOf(env.Store).FallbackMessages, OptionsOf(env.Store).FallbackChars
	var b strings.Builder
	fmt.Fprintf(&b, "[raw-fallback] %d sessions\n", len(parts))
	shown := 0
	seen := map[string]bool{} // no line twice: agents' edit tools need unique text
	for _, p := range parts {
		if shown == n {
			break
		}
		for i := len(p.msgs) - 1; i >= 0; i-- {
			m := p.msgs[i]
			if m.Meta || m.Role == "tool" || strings.HasPrefix(m.Text, "[tool result]") {
				continue
			}
			text := strings.Join(strings.Fields(withoutToolInput(m.Text)), " ")
			if utf8.RuneCountInString(text) > width {
				text = string([]rune(text)[:width])
			}
			role := m.Role
			if m.Raw {
				role = "raw"
			}
			line := fmt.Sprintf("- %s: %s\n", role, text)
			if text == "" || seen[line] {
				continue
			}
			seen[line] = true
			b.WriteString(line)
			shown++
			break
		}
	}
	if len(parts) > shown {
		fmt.Fprintf(&b, "- ... and %d more sessions (cited below)\n", len(parts)-shown)
	}
	return b.String()
}
