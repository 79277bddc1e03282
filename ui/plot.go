package ui

import (
	"fmt"
	"html"
	"html/template"
	"strings"
	"time"
)

// barChart draws values per day (the last len(days) days, oldest first)
// as an inline SVG bar chart, scaled to its largest value; label formats
// a value for the axis and each bar's tooltip. Only numbers and escaped
// labels go into the markup.
func barChart(title string, days []string, values []float64, label func(float64) string) template.HTML {
	const w, h, top, bottom, left = 600.0, 160.0, 18.0, 20.0, 4.0
	peak := 0.0
	for _, v := range values {
		peak = max(peak, v)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="plot" viewBox="0 0 %g %g" role="img" aria-label="%s" preserveAspectRatio="none">`, w, h, html.EscapeString(title))
	fmt.Fprintf(&b, `<text x="%g" y="12" class="axis">%s: peak %s</text>`, left, html.EscapeString(title), html.EscapeString(label(peak)))
	n := float64(max(len(values), 1))
	bw := (w - left) / n
	for i, v := range values {
		bh := 0.0
		if peak > 0 {
			bh = (h - top - bottom) * v / peak
		}
		x := left + float64(i)*bw
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s: %s</title></rect>`,
			x+1, h-bottom-bh, max(bw-2, 1), bh, html.EscapeString(days[i]), html.EscapeString(label(v)))
	}
	if len(days) > 0 {
		fmt.Fprintf(&b, `<text x="%g" y="%g" class="axis">%s</text>`, left, h-4, html.EscapeString(days[0]))
		fmt.Fprintf(&b, `<text x="%g" y="%g" class="axis" text-anchor="end">%s</text>`, w-2, h-4, html.EscapeString(days[len(days)-1]))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// lastDays lists the n days up to today, oldest first (YYYY-MM-DD).
func lastDays(now time.Time, n int) []string {
	out := make([]string, n)
	for i := range n {
		out[i] = now.AddDate(0, 0, i-n+1).Format(time.DateOnly)
	}
	return out
}
