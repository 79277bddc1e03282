package analysis

import (
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Dates in ranked recall. "What did Joanna watch on 1 May, 2022?" is
// answered by a message of May 2022 that says "last night": the date is
// in the message's time, not in its words. So a message with a time (its
// log line's timestamp) holds three more terms, of its month, its year
// and its month of any year (TimeTerms: they do not count in its length),
// and a question naming a date asks for them (DateTerms), at DateWeight:
// a message of that month counts as one holding a word of the question.
// These terms start with a NUL byte, which no word holds.

// DateWeight is the weight of a date the question names, against a word's
// 1 (measured on LoCoMo: 1.5 best of 0.5 to 3; temporal questions +3.5
// points, the others +1).
const DateWeight = 1.5

// TimeTerms are the terms a message's time gives it.
func TimeTerms(t time.Time) []string {
	return []string{"\x00" + t.Format("2006-01"), "\x00" + t.Format("2006"), "\x00m" + t.Format("01")}
}

// DateTermText says what a date term is, for --explain.
func DateTermText(t string) (string, bool) {
	if !strings.HasPrefix(t, "\x00") {
		return t, false
	}
	t = t[1:]
	switch {
	case strings.HasPrefix(t, "m"):
		if m, err := strconv.Atoi(t[1:]); err == nil && m >= 1 && m <= 12 {
			return "said in " + time.Month(m).String(), true
		}
	case len(t) == 4:
		return "said in " + t, true
	default:
		if d, err := time.Parse("2006-01", t); err == nil {
			return "said in " + d.Format("January 2006"), true
		}
	}
	return t, true
}

var monthNames = func() map[string]time.Month {
	m := map[string]time.Month{}
	for mo := time.January; mo <= time.December; mo++ {
		n := strings.ToLower(mo.String())
		m[n] = mo
		m[n[:3]] = mo
	}
	return m
}()

// ambiguousMonths are months that are words too: a month only when
// capitalised and not the question's first word, or beside a number.
var ambiguousMonths = map[string]bool{"may": true, "march": true, "mar": true, "jan": true, "jun": true, "dec": true}

// DateTerms are the date terms of the dates a question names: a month
// and year ("in July 2022", "on 1 May, 2022") asks for that month, a month
// alone for that month of any year, a year alone for that year.
func DateTerms(q string) []string {
	words := strings.FieldsFunc(q, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	year := func(w string) int {
		if y, err := strconv.Atoi(w); err == nil && len(w) == 4 && y >= 1970 && y <= 2200 {
			return y
		}
		return 0
	}
	isNum := func(i int) bool {
		if i < 0 || i >= len(words) {
			return false
		}
		_, err := strconv.Atoi(words[i])
		return err == nil
	}
	var out []string
	add := func(t string) {
		for _, o := range out {
			if o == t {
				return
			}
		}
		out = append(out, t)
	}
	used := map[int]bool{}
	for i, w := range words {
		lw := strings.ToLower(w)
		m, ok := monthNames[lw]
		if !ok {
			continue
		}
		if ambiguousMonths[lw] && !isNum(i-1) && !isNum(i+1) && (i == 0 || !unicode.IsUpper(rune(w[0]))) {
			continue
		}
		y := 0
		for j := i + 1; j < min(len(words), i+3); j++ {
			if y = year(words[j]); y > 0 {
				used[j] = true
				break
			}
		}
		if y > 0 {
			add("\x00" + strconv.Itoa(y) + "-" + twoDigits(int(m)))
		} else {
			add("\x00m" + twoDigits(int(m)))
		}
	}
	for i, w := range words {
		if y := year(w); y > 0 && !used[i] {
			add("\x00" + w)
		}
	}
	return out
}

func twoDigits(n int) string {
	if n < 10 {
		return "0" + strconv.Itoa(n)
	}
	return strconv.Itoa(n)
}
