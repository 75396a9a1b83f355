// Command fedpq is the command-line interface of fedpq: private,
// communication-efficient federated learning.
//
// Usage:
//
//	fedpq <command> [flags]
//
// Run "fedpq help" for the commands and "fedpq <command> -h" for their flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/fedpq/fedpq/model"
)

// command is one subcommand: its one-line summary and its entry point.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{}

// order is the order commands are listed in help.
var order = []string{"run", "server", "client", "keygen", "split", "model", "export", "plot", "dme", "audit", "attack", "mechanisms", "reproduce", "bench"}

func main() {
	// SIGTERM (an orchestrator's) and SIGINT ask a command to stop
	// cleanly; a second signal kills it.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop)
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches args to a command and returns the process exit code:
// 0 success, 1 failure, 2 bad usage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "fedpq: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	err := cmd.run(ctx, args[1:], stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	if errors.As(err, new(badValue)) || errors.As(err, new(*model.SpecError)) {
		fmt.Fprintf(stderr, "fedpq %s: %v\nRun \"fedpq %s -h\" for its flags.\n", args[0], err, args[0])
		return 2
	}
	fmt.Fprintf(stderr, "fedpq %s: %v\n", args[0], err)
	return 1
}

// errUsage marks an error already reported with the command's usage.
var errUsage = errors.New("usage")

// badValue is a bad setting (a flag's value, or a key of the --config
// file): a usage error, exit status 2, where a failure at run time (a
// missing file, a lost server) is status 1. It is printed with a pointer to
// the command's flags rather than the whole list.
type badValue struct{ error }

func (e badValue) Unwrap() error { return e.error }

func usage(w io.Writer) {
	fmt.Fprint(w, `fedpq: private, communication-efficient federated learning.

Every client update leaves the client quantized to a few bits and locally
differentially private; the server estimates the mean from the messages.

Usage:
  fedpq <command> [flags]

Commands:
`)
	for _, name := range order {
		fmt.Fprintf(w, "  %-12s %s\n", name, commands[name].summary)
	}
	fmt.Fprint(w, `
Run "fedpq <command> -h" for the flags of a command.
`)
}

// newFlags returns a FlagSet that prints its usage to stderr, with a
// synopsis and description above the flag defaults.
func newFlags(name, synopsis, description string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("fedpq "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	if flagSets != nil {
		flagSets[name] = fs
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: fedpq %s %s\n\n%s", name, synopsis, description)
		if _, grouped := helpGroups[name]; !grouped {
			fmt.Fprintf(stderr, "\nFlags:\n")
		}
		printFlags(stderr, name, fs)
	}
	return fs
}

// parse parses args, turning a bad flag into errUsage (the FlagSet has
// already printed why).
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "fedpq: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	return nil
}
