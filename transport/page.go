package transport

import (
	"fmt"
	"html/template"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/fedpq/fedpq/privacy"
)

// The live page of a run, served by the server at its metrics address
// (/): where the run stands, its accuracy curve, the privacy each observer
// has seen spent against the budget, and the uploads and refusals of each
// round. It is one self-contained HTML page with inline SVG and CSS and no
// script, for clusters without the internet; it reloads itself every
// pageRefresh.

// pageRefresh is how often the page reloads itself.
const pageRefresh = 5 * time.Second

// servePage writes the live page.
func (m *ServerMetrics) servePage(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := pageTemplate.Execute(w, newPageData(m.live.snapshot())); err != nil {
		// The header is gone; the page ends short, and says so.
		fmt.Fprintf(w, "<p>error rendering the page: %s</p>", template.HTMLEscapeString(err.Error()))
	}
}

// pageData is what the template shows: text already formatted, and the
// charts as SVG markup built from numbers only.
type pageData struct {
	Refresh                   int
	Now                       string
	Status, StatusClass       string
	Up                        string
	Done, RunRounds           int
	Round                     string
	Deadline                  string
	Late                      bool
	Connected, Joined         int
	Async                     string
	Accuracy                  string
	Refusals                  int
	Privacy                   []observerRow
	Target                    string
	UserNote                  string
	AccuracyChart, RoundChart template.HTML
	Points                    string
}

// observerRow is one observer's privacy: user-level over the whole run,
// and the ledger's bound on the uploads (per-parameter mechanisms).
type observerRow struct {
	Observer, User, Upload string
	// Budget is the user-level eps as a percentage of the target (0 to
	// 100), for the bar; -1 without a target or a bound.
	Budget float64
}

func newPageData(s snapshot) pageData {
	d := pageData{Refresh: int(pageRefresh.Seconds()), Now: s.Now.UTC().Format("2006-01-02 15:04:05 UTC"),
		Up: s.Now.Sub(s.Started).Round(time.Second).String(), Done: s.Done, RunRounds: s.RunRounds,
		Connected: s.Connected, Joined: s.Joined, Async: s.Async, Refusals: s.Refusals, Accuracy: "not evaluated yet"}
	switch {
	case s.Over:
		d.Status, d.StatusClass = "finished", "done"
	case s.Serving:
		d.Status, d.StatusClass = "running", "ok"
	case s.RunRounds == 0:
		d.Status, d.StatusClass = "loading the run", "wait"
	default:
		d.Status, d.StatusClass = "not serving (stopping or stopped)", "bad"
	}
	if s.Round > s.Done && !s.Over {
		d.Round = fmt.Sprintf("round %d: %d of %d uploads counted", s.Round, s.Uploads, s.Chosen)
		left := s.Deadline.Sub(s.Now).Round(time.Second)
		if left >= 0 {
			d.Deadline = fmt.Sprintf("deadline in %v", left)
		} else {
			d.Deadline, d.Late = fmt.Sprintf("%v past its deadline", -left), true
		}
	} else if s.Serving && !s.Over {
		d.Round = fmt.Sprintf("waiting for clients before round %d", s.Done+1)
	}
	if n := len(s.Accuracy); n > 0 {
		a := s.Accuracy[n-1]
		d.Accuracy = fmt.Sprintf("%.2f%% (round %d)", 100*a.Accuracy, a.Round)
	}
	d.Privacy, d.Target, d.UserNote = privacyRows(s.Ledger, s.User, s.Target)
	d.AccuracyChart = accuracyChart(s.Accuracy, s.RunRounds)
	d.RoundChart = roundChart(s.Rounds, s.RunRounds)
	d.Points = fmt.Sprintf("%d round points, %d accuracy points", len(s.Rounds), len(s.Accuracy))
	return d
}

// privacyRows is a row per observer that has a bound of either kind, the
// target's text, and the user-level entry's note on amplification.
func privacyRows(l *privacy.Ledger, u *privacy.UserLevel, target float64) ([]observerRow, string, string) {
	t := "none (the run has no user-level budget)"
	if target > 0 {
		t = fmt.Sprintf("ε = %g against whoever gets the models", target)
	}
	var upload map[string]*privacy.Spent
	if l != nil {
		upload = map[string]*privacy.Spent{"eavesdropper": l.Eavesdropper, "server": l.Server, "partner": l.Partner}
	}
	var user map[string]*privacy.Bound
	note := "no user-level guarantee stated yet"
	if u != nil {
		user = map[string]*privacy.Bound{"model": u.Model, "server": u.Server, "eavesdropper": u.Eavesdropper}
		note = fmt.Sprintf("%d rounds of the client in the most; amplification: %s", u.Rounds, u.Amplification)
	}
	var rows []observerRow
	for _, o := range []string{"model", "server", "eavesdropper", "partner"} {
		r := observerRow{Observer: o, User: "—", Upload: "—", Budget: -1}
		b := user[o]
		if b != nil {
			r.User = fmt.Sprintf("ε = %.4g at δ = %.2g", b.Eps, b.Delta)
			if target > 0 && o == "model" {
				r.Budget = math.Min(100, 100*b.Eps/target)
			}
		}
		if sp := upload[o]; sp != nil && sp.UploadOptimal != nil {
			r.Upload = fmt.Sprintf("ε = %.4g at δ = %.2g", sp.UploadOptimal.Eps, sp.UploadOptimal.Delta)
		}
		if b != nil || r.Upload != "—" {
			rows = append(rows, r)
		}
	}
	return rows, t, note
}

// The charts' geometry: a plot area inside margins, in SVG user units.
const (
	chartW, chartH       = 640, 200
	chartLeft, chartBase = 48, 170 // the y axis's x, and the x axis's y
	chartTop, chartRight = 12, 628
)

// xOf places round t of a run of n rounds on the x axis.
func xOf(t, n int) float64 {
	if n < 1 {
		n = 1
	}
	return chartLeft + float64(t)/float64(n)*(chartRight-chartLeft)
}

// yOf places v in [0, top] on the y axis.
func yOf(v, top float64) float64 {
	if top <= 0 {
		return chartBase
	}
	return chartBase - v/top*(chartBase-chartTop)
}

// axes draws the two axes, the x axis's ticks (rounds 0 and n, and one
// between), and the y axis's (0, the middle and top, as label says).
func axes(b *strings.Builder, n int, label func(float64) string, top float64) {
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" class="axis"/>`, chartLeft, chartBase, chartRight, chartBase)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" class="axis"/>`, chartLeft, chartTop, chartLeft, chartBase)
	for _, f := range []float64{0, 0.5, 1} {
		y := yOf(f*top, top)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" class="grid"/>`, chartLeft, y, chartRight, y)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" class="tick" text-anchor="end">%s</text>`, chartLeft-4, y+4, label(f*top))
	}
	for _, t := range []int{0, n / 2, n} {
		fmt.Fprintf(b, `<text x="%.1f" y="%d" class="tick" text-anchor="middle">%d</text>`, xOf(t, n), chartBase+16, t)
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" class="tick" text-anchor="end">round</text>`, chartRight, chartBase+28)
}

// accuracyChart is the test accuracy at each evaluated round, 0 to 100%,
// over the run's rounds.
func accuracyChart(h []accuracyPoint, n int) template.HTML {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="test accuracy by round">`, chartW, chartH+20, chartW, chartH+20)
	axes(&b, n, func(v float64) string { return fmt.Sprintf("%.0f%%", 100*v) }, 1)
	if len(h) > 0 {
		b.WriteString(`<polyline class="acc" points="`)
		for _, p := range h {
			fmt.Fprintf(&b, "%.1f,%.1f ", xOf(p.Round, n), yOf(p.Accuracy, 1))
		}
		b.WriteString(`"/>`)
		last := h[len(h)-1]
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3.5" class="accdot"/>`, xOf(last.Round, n), yOf(last.Accuracy, 1))
	} else {
		fmt.Fprintf(&b, `<text x="%d" y="%d" class="empty" text-anchor="middle">no evaluated round yet</text>`, (chartLeft+chartRight)/2, chartBase/2)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// roundChart is each round's clients chosen (the outline), uploads
// counted (filled) and refusals (red, below), per round: a bucket of
// merged rounds shows their mean per round.
func roundChart(h []roundPoint, n int) template.HTML {
	top := 1.0
	for _, p := range h {
		k := float64(p.Last - p.First + 1)
		top = math.Max(top, math.Max(float64(p.Chosen), float64(p.Refusals))/k)
	}
	top = math.Ceil(top)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="uploads and refusals by round">`, chartW, chartH+20, chartW, chartH+20)
	axes(&b, n, func(v float64) string { return fmt.Sprintf("%.3g", v) }, top)
	for _, p := range h {
		k := float64(p.Last - p.First + 1)
		x0, x1 := xOf(p.First-1, n), xOf(p.Last, n)
		w := math.Max(1, (x1-x0)*0.8)
		for _, bar := range []struct {
			class string
			v     float64
		}{{"chosen", float64(p.Chosen) / k}, {"uploads", float64(p.Uploads) / k}, {"refusals", float64(p.Refusals) / k}} {
			if bar.v <= 0 {
				continue
			}
			y, x, bw := yOf(bar.v, top), x0, w
			if bar.class == "refusals" { // a narrow bar at the right of the round's own
				bw = math.Max(1, w/3)
				x = x0 + w - bw
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" class="%s"/>`, x, y, bw, chartBase-y, bar.class)
		}
	}
	if len(h) == 0 {
		fmt.Fprintf(&b, `<text x="%d" y="%d" class="empty" text-anchor="middle">no round completed yet</text>`, (chartLeft+chartRight)/2, chartBase/2)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

var pageTemplate = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{{.Refresh}}">
<title>fedpq run: {{.Status}}, {{.Done}} of {{.RunRounds}} rounds</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:16px 24px;color:#222;max-width:1000px}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:18px 0 4px}
.badge{padding:2px 8px;border-radius:4px;color:#fff;font-weight:600}
.ok{background:#2a7d2a}.done{background:#345}.wait{background:#a70}.bad{background:#b22}
table{border-collapse:collapse} td,th{padding:3px 10px;border-bottom:1px solid #ddd;text-align:left}
.late{color:#b22;font-weight:600} .small{color:#666;font-size:12px}
.bar{display:inline-block;width:160px;height:10px;background:#eee;vertical-align:middle}
.bar span{display:block;height:10px;background:#c60}
svg text{font:11px system-ui,sans-serif;fill:#444} .axis{stroke:#444} .grid{stroke:#e4e4e4}
.acc{fill:none;stroke:#1f5fa8;stroke-width:2} .accdot{fill:#1f5fa8}
.chosen{fill:none;stroke:#7a9cc6} .uploads{fill:#7a9cc6} .refusals{fill:#c33}
.empty{fill:#999;font-size:13px}
</style></head><body>
<h1>fedpq run <span class="badge {{.StatusClass}}" id="status">{{.Status}}</span></h1>
<div class="small">{{.Now}}; server up {{.Up}}; this page reloads every {{.Refresh}} s</div>
<h2>Progress</h2>
<table>
<tr><th>rounds done</th><td id="done">{{.Done}} of {{.RunRounds}}</td></tr>
{{if .Round}}<tr><th>under way</th><td id="round">{{.Round}}{{if .Deadline}}, <span{{if .Late}} class="late"{{end}}>{{.Deadline}}</span>{{end}}</td></tr>{{end}}
<tr><th>clients</th><td id="clients">{{.Connected}} connected; {{.Joined}} joined since the server started</td></tr>
{{if .Async}}<tr><th>mode</th><td id="mode">{{.Async}}</td></tr>{{end}}
<tr><th>test accuracy</th><td id="accuracy">{{.Accuracy}}</td></tr>
<tr><th>refusals</th><td>{{.Refusals}} since the last round completed (joins and messages)</td></tr>
</table>
<h2>Test accuracy</h2>
{{.AccuracyChart}}
<h2>Privacy spent</h2>
<table id="privacy">
<tr><th>observer</th><th>user-level, whole run</th><th>budget used</th><th>uploads (per-parameter ledger)</th></tr>
{{range .Privacy}}<tr><td>{{.Observer}}</td><td>{{.User}}</td><td>{{if ge .Budget 0.0}}<span class="bar"><span style="width:{{printf "%.1f" .Budget}}%"></span></span> {{printf "%.0f" .Budget}}%{{else}}—{{end}}</td><td>{{.Upload}}</td></tr>
{{else}}<tr><td colspan="4">nothing spent yet, or the mechanism states no guarantee</td></tr>{{end}}
</table>
<div class="small">budget: {{.Target}}; {{.UserNote}}</div>
<h2>Uploads and refusals per round</h2>
{{.RoundChart}}
<div class="small">outline: clients chosen; filled: uploads counted; red: refused joins and messages. Older rounds are merged into buckets (mean per round) to keep the history bounded: {{.Points}}.</div>
</body></html>
`))
