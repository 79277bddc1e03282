package recall

import (
	"context"
	"sort"

	"github.com/memwatch/memwatch/secrets"
)

// searchKind answers a search that names a kind of credential
// (aws-access-token, [REDACTED:github-pat]): what memwatch serves holds a
// credential as its kind's mask, so that is what a person searches for.
// It finds the lines holding the name as written (a mask in a history
// entry), and the lines holding a credential of the kind: those holding
// one of its rule's keywords where the detector finds one of that kind.
// Results come newest first, each once.
func searchKind(ctx context.Context, q Query, o Options) ([]Result, Stats, error) {
	kind := q.Kind
	q.Kind = ""
	runs := []Query{q}
	for _, k := range secrets.Default().Keywords(kind) {
		kq, err := ParseQuery(k)
		if err != nil {
			continue
		}
		kq.Kind, kq.Only = "", kind
		runs = append(runs, kq)
	}
	var all []Result
	var st Stats
	seen := map[string]bool{}
	for i, rq := range runs {
		rs, s, err := search(ctx, rq, o)
		if err != nil {
			return all, st, err
		}
		if i == 0 {
			st = s
		} else {
			st.Indexed += s.Indexed
			st.Blocks += s.Blocks
			st.BlocksRead += s.BlocksRead
			st.BytesRead += s.BytesRead
			st.Duration += s.Duration
			st.More += s.More
			st.MoreCapped = st.MoreCapped || s.MoreCapped
			st.StoppedEarly = st.StoppedEarly || s.StoppedEarly
		}
		for _, r := range rs {
			if !seen[r.Citation] {
				seen[r.Citation] = true
				all = append(all, r)
			}
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Time.After(all[j].Time) })
	if len(all) > o.Limit {
		st.More += len(all) - o.Limit
		st.StoppedEarly = true
		all = all[:o.Limit]
	}
	if all == nil {
		all = []Result{}
	}
	return all, st, nil
}

// holdsKind reports whether text holds a credential of kind.
func holdsKind(text []byte, kind string) bool {
	for _, f := range secrets.Default().Find(string(text)) {
		if f.Rule == kind {
			return true
		}
	}
	return false
}
