package report

import (
	"fmt"
	"strings"
)

// Table renders runs as a Markdown table, one row per run: name,
// mechanism, dataset, model, rounds, final and best accuracy (with the
// round of the best), uplink bits per parameter, eps spent and seconds.
//
// A run without summary.json (in progress, or crashed) is still shown, with
// what its rounds say: rounds recorded, the last and the best finite
// accuracy, the mean bits per parameter, the eps spent by its last round;
// its name is marked "(unfinished)" and the columns only the summary knows
// are "-".
// An eps of 0 means no privacy and is shown as "-".
func Table(runs []*Run) string {
	var b strings.Builder
	b.WriteString("| run | mechanism | dataset | model | rounds | final accuracy | best accuracy | uplink bits/param | eps spent | seconds |\n")
	b.WriteString("|---|---|---|---|---:|---:|---:|---:|---:|---:|\n")
	for i, label := range runLabels(runs) {
		s, finished := runs[i].summary()
		if !finished {
			label += " (unfinished)"
		}
		final, best := "-", "-"
		if finished || len(runs[i].accuracy()) > 0 {
			final = fmt.Sprintf("%.4f", s.FinalAccuracy)
			best = fmt.Sprintf("%.4f (round %d)", s.BestAccuracy, s.BestRound)
		}
		eps := "-"
		if s.EpsilonSpent != 0 {
			eps = fmt.Sprintf("%.4g", s.EpsilonSpent)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %d | %s | %s | %.4g | %s | %.1f |\n",
			cell(label), cell(s.Mechanism), cell(s.Dataset), cell(s.Model), s.Rounds,
			final, best, s.UplinkBitsPerParam, eps, s.Seconds)
	}
	return b.String()
}

// summary returns the run's summary and true, or, for a run without one,
// the part of a summary that Table shows, derived from its rounds, and
// false.
func (r *Run) summary() (Summary, bool) {
	if r.Summary != nil {
		return *r.Summary, true
	}
	s := Summary{Rounds: len(r.Rounds)}
	if len(r.Rounds) == 0 {
		return s, false
	}
	var bits float64
	for _, rd := range r.Rounds {
		bits += rd.UplinkBitsPerParam
	}
	for i, pt := range r.accuracy() {
		s.FinalAccuracy = pt[1]
		if i == 0 || pt[1] > s.BestAccuracy {
			s.BestAccuracy, s.BestRound = pt[1], int(pt[0])
		}
	}
	last := r.Rounds[len(r.Rounds)-1]
	s.UplinkBitsPerParam = bits / float64(len(r.Rounds))
	s.EpsilonSpent = last.EpsilonSpent
	s.Seconds = last.Seconds
	return s, false
}

// cell makes text safe inside a Markdown table cell: a "|" would end the
// cell, and an empty cell reads as a rendering error.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.ReplaceAll(s, "|", `\|`)
}
