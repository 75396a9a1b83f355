package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/fedpq/fedpq/mech"
)

func init() {
	commands["mechanisms"] = command{
		summary: "list the mechanisms, a line each",
		run:     runMechanisms,
	}
}

func runMechanisms(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("mechanisms", "", "Lists every mechanism fedpq implements: its name, whether it is eps-LDP, and\nwhat it does; then DP-FedAvg's mechanisms, which encode a client's whole\nupdate clipped in L2 norm (--clip; docs/privacy.md#user-level-privacy-for-the-whole-run).\n", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tLDP\tDESCRIPTION")
	for _, name := range mech.Names() {
		info, _ := mech.Lookup(name)
		ldp := "no"
		if info.LDP {
			ldp = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", name, ldp, info.Summary)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "\nDP-FedAvg (--clip C with --noise-multiplier or --target-epsilon; none: the server adds the noise):")
	tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDESCRIPTION")
	for _, name := range mech.L2Names() {
		info, _ := mech.Lookup(name)
		fmt.Fprintf(tw, "%s\t%s\n", name, info.Summary)
	}
	return tw.Flush()
}
