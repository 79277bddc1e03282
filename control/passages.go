package control

import "strings"

// Passage is results of one file whose lines (with the turns around
// them) touch or overlap, shown as one passage as rg merges overlapping
// context: Members index the results, in line order; the passage ranks
// where its best member did.
type Passage struct {
	Members  []int
	From, To int64 // the lines it covers
}

// Passages groups results into passages, in the order of each passage's
// best-ranked member. Only results shown with the turns around them
// (recall -C N) join others: a bare hit is a passage of its own, its line
// cited alone, as ranked.
func Passages(results []Result) []Passage {
	type span struct {
		file     string
		from, to int64
	}
	spans := make([]span, len(results))
	for i, r := range results {
		file := r.Host + "\x00" + r.Citation
		if k := strings.LastIndex(r.Citation, "#L"); k >= 0 {
			file = r.Host + "\x00" + r.Citation[:k]
		}
		s := span{file: file, from: r.LineNumber, to: r.LineNumber}
		if len(r.Before) > 0 {
			s.from = min(s.from, r.Before[0].Line)
		}
		if len(r.After) > 0 {
			s.to = max(s.to, r.After[len(r.After)-1].Line)
		}
		spans[i] = s
	}
	var out []Passage
	owner := make([]int, len(results)) // results[i] is in out[owner[i]]
	for i := range results {
		owner[i] = -1
	}
	bare := func(r Result) bool { return r.LineNumber <= 0 || len(r.Before) == 0 && len(r.After) == 0 }
	for i := range results {
		if owner[i] >= 0 || bare(results[i]) {
			if owner[i] < 0 {
				owner[i] = len(out)
				out = append(out, Passage{Members: []int{i}, From: spans[i].from, To: spans[i].to})
			}
			continue
		}
		p := Passage{Members: []int{i}, From: spans[i].from, To: spans[i].to}
		owner[i] = len(out)
		// Grow it while another result of the file touches it.
		for grew := true; grew; {
			grew = false
			for j := range results {
				if owner[j] >= 0 || bare(results[j]) || spans[j].file != spans[i].file {
					continue
				}
				if spans[j].from <= p.To+1 && spans[j].to+1 >= p.From {
					p.Members = append(p.Members, j)
					p.From, p.To = min(p.From, spans[j].from), max(p.To, spans[j].to)
					owner[j] = len(out)
					grew = true
				}
			}
		}
		sortByLine(p.Members, results)
		out = append(out, p)
	}
	return out
}

func sortByLine(m []int, results []Result) {
	for a := 1; a < len(m); a++ {
		for b := a; b > 0 && results[m[b]].LineNumber < results[m[b-1]].LineNumber; b-- {
			m[b], m[b-1] = m[b-1], m[b]
		}
	}
}
