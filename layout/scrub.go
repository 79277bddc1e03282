package layout

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/jobs"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/secrets"
	"github.com/memwatch/memwatch/state"
)

// RuleScrub masks the credentials in an agent's own session logs once
// they are idle: the opt-in scrub_secrets of a store.
const RuleScrub = "scrub-secrets"

// scrubNS keeps, per log, what the scrub last found clean (the log's
// generation, sequence and captured size): a log is read again only when
// it has changed since.
const scrubNS = "scrubbed"

// ScrubRule is the scrub of a layout whose stores have session logs;
// setting says whether a store asks for it and after how long a log is
// idle. It is the one rewrite that deliberately removes bytes an agent
// wrote: each value becomes its mask ([REDACTED:aws-access-token]) in the
// agent's file, through the one safe rewrite (an agent's write meanwhile
// is kept, the file stays one JSON document per line), and in the spool;
// no copy of a value is kept (no archive: the record cannot be undone),
// and the journal says the kinds and their counts.
func ScrubRule(setting func(*policy.Store) (on bool, idle time.Duration)) Rule {
	return Rule{
		Name: RuleScrub,
		Every: func(s *policy.Store) time.Duration {
			on, idle := setting(s)
			if !on {
				return 0
			}
			return min(max(idle/2, time.Second), 5*time.Minute)
		},
		Targets: func(ctx context.Context, env *Env, root *confine.Root) ([]string, error) {
			on, idle := setting(env.Store)
			if !on || env.Spool == nil {
				return nil, nil
			}
			logs, err := env.Spool.Logs(ctx, root.ID())
			if err != nil {
				return nil, err
			}
			var out []string
			for _, l := range logs {
				if l.Missing || l.Gen == 0 || !env.Idle(root, l, idle) {
					continue
				}
				if fi, err := root.Lstat(l.Path); err != nil || !fi.Mode().IsRegular() {
					continue // a database's conversation, or gone
				}
				if v, ok, _ := env.DB.Get(ctx, scrubNS, scrubKey(root, l.Path)); ok && string(v) == scrubMark(l.Gen, l.Seq, l.Offset) {
					continue
				}
				out = append(out, l.Path)
			}
			return out, nil
		},
		Run: runScrub,
	}
}

func scrubKey(root *confine.Root, rel string) string { return root.ID().Key() + "\x00" + rel }

func scrubMark(gen, seq, off int64) string { return fmt.Sprintf("%d/%d/%d", gen, seq, off) }

// maskSpoolLine is the spool's side of the scrub: a captured line masked
// as the agent's file is.
func maskSpoolLine(line []byte) ([]byte, bool) {
	out, kinds := secrets.Default().MaskLine(line)
	return out, len(kinds) > 0
}

func runScrub(ctx context.Context, env *Env, root *confine.Root, target string) (jobs.Result, error) {
	log, ok, err := env.Spool.Find(ctx, root.ID(), target)
	if err != nil || !ok {
		return jobs.Result{}, err
	}
	// The spool first: a value the rewrite below cannot take out yet (the
	// agent writes on) is gone from memwatch's own copy all the same.
	spooled, err := env.Spool.Mask(ctx, log.ID, maskSpoolLine)
	if err != nil {
		return jobs.Result{}, err
	}
	var kinds map[string]int
	rec := env.Record(RuleScrub)
	out, err := env.Rewriter.Apply(ctx, rewrite.Request{
		Root:   root,
		Target: target,
		Scrub:  true,
		Compute: func(ctx context.Context, old []byte) ([]byte, error) {
			masked, found := maskLog(old)
			if len(found) == 0 {
				return nil, rewrite.ErrUnchanged
			}
			kinds = found
			rec.Reason = "masked " + countKinds(found) + " in the agent's log (scrub_secrets); no copy of the values is kept"
			return masked, nil
		},
	}, rec)
	if res, ok := env.Deferred(ctx, root, RuleScrub, target, err); ok {
		return res, nil
	}
	if err != nil && !errors.Is(err, rewrite.ErrConflict) {
		return jobs.Result{}, err
	}
	env.NotBusy(root, RuleScrub, target)
	// Lines captured while the file was rewritten (the agent's version
	// captured before memwatch's write) are masked too.
	more, err := env.Spool.Mask(ctx, log.ID, maskSpoolLine)
	if err != nil {
		return jobs.Result{}, err
	}
	if out.Status == state.Done {
		env.Log.Info("masked the credentials of an idle log", "store", env.Store.Name, "root", root.Path(), "rule", RuleScrub, "path", target, "kinds", countKinds(kinds), "spool_lines", spooled+more, "journal", out.Record)
		// No cooldown: a scrub cannot loop (what it wrote holds nothing
		// to mask), and a value the agent writes after it must not wait
		// the store's cooldown in the clear.
		return jobs.Result{}, nil
	}
	if out.Status == state.Skipped {
		// Clean as it is: looked at again only when it changes.
		if l, ok, err := env.Spool.Find(ctx, root.ID(), target); err == nil && ok {
			env.Logged(env.DB.Put(ctx, scrubNS, scrubKey(root, target), []byte(scrubMark(l.Gen, l.Seq, l.Offset))), "the scrub's mark")
		}
	}
	return jobs.Result{}, nil
}

// maskLog masks every line of a log, and counts what it masked by kind.
func maskLog(b []byte) ([]byte, map[string]int) {
	var out bytes.Buffer
	found := map[string]int{}
	for len(b) > 0 {
		line := b
		nl := bytes.IndexByte(b, '\n')
		if nl >= 0 {
			line, b = b[:nl], b[nl+1:]
		} else {
			b = nil
		}
		m, kinds := secrets.Default().MaskLine(line)
		for _, k := range kinds {
			found[k]++
		}
		out.Write(m)
		if nl >= 0 {
			out.WriteByte('\n')
		}
	}
	if len(found) == 0 {
		return nil, nil
	}
	return out.Bytes(), found
}

// countKinds says "3 credential(s): aws-access-token x2, github-pat x1".
func countKinds(found map[string]int) string {
	var names []string
	n := 0
	for k, c := range found {
		names = append(names, fmt.Sprintf("%s x%d", k, c))
		n += c
	}
	sort.Strings(names)
	return fmt.Sprintf("%d credential(s): %s", n, strings.Join(names, ", "))
}
