package extern

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/fedpq/fedpq/extern/internal/frame"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Options say how to run a trainer process.
type Options struct {
	// Command is the command line that starts one trainer, run by
	// /bin/sh -c in fedpq's working directory, for example
	// "/usr/bin/python3 python/examples/mnist_cnn2.py".
	Command string
	// Timeout bounds each request to a trainer; 0 is DefaultTimeout. Its
	// start (up to its setup reply) has at least MinStartTimeout. A
	// trainer that takes longer is stopped.
	Timeout time.Duration
	// Stderr receives each line the trainers write to their stderr,
	// prefixed with the trainer's number; nil drops them. Errors quote a
	// trainer's last lines either way.
	Stderr io.Writer
	// Threads is the number of threads each trainer is asked to use; 0
	// divides the machine's cores among the trainers handed out.
	Threads int
}

// DefaultTimeout is a request's limit when Options.Timeout is 0: long
// enough for a large model's local epochs on a slow machine, short enough
// that a hung trainer does not hold a run for ever.
const DefaultTimeout = 10 * time.Minute

// process is one running trainer and its three pipes. Its requests are
// sequential (Trainer holds a lock around them).
type process struct {
	id      int
	command string
	pid     int
	cmd     *exec.Cmd
	in      *bufio.Writer
	inFile  *os.File
	out     *bufio.Reader
	outFile *os.File

	exited  chan struct{} // closed once the process has been waited for
	waitErr error         // its exit, once exited is closed
	drained chan struct{} // closed once its stderr has been read to the end
	tail    *lineTail

	mu      sync.Mutex
	stopped string // why fedpq stopped it ("" while it has not)
	broken  error  // the failure after which it is not used again
}

// lineTail keeps the last lines a trainer wrote to stderr.
type lineTail struct {
	mu    sync.Mutex
	lines []string
}

const tailLines = 12

func (t *lineTail) add(s string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(s) > 400 {
		s = s[:400] + "..."
	}
	t.lines = append(t.lines, s)
	if len(t.lines) > tailLines {
		t.lines = t.lines[len(t.lines)-tailLines:]
	}
}

func (t *lineTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}

// stderrMu keeps the lines of concurrent trainers whole on Options.Stderr.
var stderrMu sync.Mutex

// startProcess starts trainer id and returns once it is running; its
// hello is not read yet.
func startProcess(id int, o *Options) (*process, error) {
	if strings.TrimSpace(o.Command) == "" {
		return nil, errors.New("trainer: no command")
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd := exec.Command("/bin/sh", "-c", o.Command)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	setGroup(cmd)
	err = cmd.Start()
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("trainer %d: starting %q: %w", id, o.Command, err)
	}
	p := &process{
		id: id, command: o.Command, pid: cmd.Process.Pid, cmd: cmd,
		in: bufio.NewWriterSize(inW, 1<<16), inFile: inW, out: bufio.NewReaderSize(outR, 1<<16), outFile: outR,
		exited: make(chan struct{}), drained: make(chan struct{}), tail: &lineTail{},
	}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	go func() {
		defer close(p.drained)
		defer errR.Close()
		sc := bufio.NewScanner(errR)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.tail.add(line)
			if o.Stderr != nil {
				stderrMu.Lock()
				fmt.Fprintf(o.Stderr, "trainer %d: %s\n", id, line)
				stderrMu.Unlock()
			}
		}
	}()
	return p, nil
}

// label names the process in errors.
func (p *process) label() string { return fmt.Sprintf("trainer %d (pid %d)", p.id, p.pid) }

// stop kills the process (and its process group), recording why; it is
// safe to call more than once and from any goroutine.
func (p *process) stop(why string) {
	p.mu.Lock()
	if p.stopped == "" {
		p.stopped = why
	}
	p.mu.Unlock()
	killGroup(p.cmd)
}

// request sends one message and reads its reply, within timeout and ctx:
// when either runs out the process is stopped, which ends the blocked
// write or read. A reply of type "error" (the trainer's own code failed)
// is returned as a *TrainerError and leaves the process usable; any other
// failure leaves it broken.
func (p *process) request(ctx context.Context, timeout time.Duration, what string, h *frame.Header, body ...[]byte) (*frame.Frame, error) {
	if p.broken != nil {
		return nil, p.broken
	}
	timer := time.AfterFunc(timeout, func() {
		p.stop(fmt.Sprintf("did not answer %s within %v (trainer_timeout); stopped it", what, timeout))
	})
	defer timer.Stop()
	unwatch := context.AfterFunc(ctx, func() { p.stop(fmt.Sprintf("stopped during %s: %v", what, context.Cause(ctx))) })
	defer unwatch()
	var f *frame.Frame
	err := frame.Write(p.in, h, body...)
	if err == nil {
		f, err = frame.Read(p.out)
	}
	if err == nil && f.H.Type == "error" {
		return nil, &TrainerError{Trainer: p.label(), What: what, Message: f.H.Message}
	}
	if err != nil {
		p.broken = p.failure(what, err)
		return nil, p.broken
	}
	return f, nil
}

// readHello reads the trainer's first message within timeout.
func (p *process) readHello(timeout time.Duration) (*frame.Frame, error) {
	timer := time.AfterFunc(timeout, func() {
		p.stop(fmt.Sprintf("sent no hello within %v of its start (trainer_timeout, at least %v for a start); stopped it", timeout, MinStartTimeout))
	})
	defer timer.Stop()
	f, err := frame.Read(p.out)
	if err != nil {
		p.broken = p.failure("its start", err)
		return nil, p.broken
	}
	return f, nil
}

// failure explains why a request failed, and stops the process: it was
// stopped (a timeout, a cancelled run), it exited (with its status and its
// last lines of stderr), or it broke the protocol.
func (p *process) failure(what string, err error) error {
	p.mu.Lock()
	stopped := p.stopped
	p.mu.Unlock()
	if stopped != "" {
		p.stop(stopped)
		return &ProcessError{Trainer: p.label(), Command: p.command, Reason: stopped, Stderr: p.settledTail()}
	}
	if !errors.Is(err, frame.ErrFraming) {
		// An EOF or a broken pipe: the process is exiting, most likely.
		select {
		case <-p.exited:
		case <-time.After(2 * time.Second):
		}
	}
	select {
	case <-p.exited:
		reason := fmt.Sprintf("exited during %s", what)
		if p.waitErr != nil {
			reason = fmt.Sprintf("exited during %s: %v", what, p.waitErr)
		} else {
			reason += " with status 0"
		}
		if errors.Is(err, frame.ErrFraming) {
			reason += fmt.Sprintf(" (after %v)", err)
		}
		return &ProcessError{Trainer: p.label(), Command: p.command, Reason: reason, Stderr: p.settledTail()}
	default:
	}
	p.stop("broke the protocol")
	return &ProcessError{Trainer: p.label(), Command: p.command, Reason: fmt.Sprintf("%s: %v; stopped it", what, err), Stderr: p.settledTail()}
}

// settledTail is the stderr tail once the process's stderr has been read
// to its end (at most a second after it exited).
func (p *process) settledTail() string {
	select {
	case <-p.drained:
	case <-time.After(time.Second):
	}
	return p.tail.String()
}

// close asks the trainer to exit (a bye, then the end of its stdin) and
// waits up to grace for it; then it is killed.
func (p *process) close(grace time.Duration) {
	if p.broken == nil {
		_ = frame.Write(p.in, &frame.Header{Type: "bye"})
	}
	p.inFile.Close()
	select {
	case <-p.exited:
	case <-time.After(grace):
		p.stop("did not exit after bye")
		<-p.exited
	}
	killGroup(p.cmd) // its children, if it left any
	p.outFile.Close()
	select {
	case <-p.drained:
	case <-time.After(time.Second):
	}
}

// ProcessError is a trainer process that failed: it timed out, exited,
// or broke the protocol. The process is not used again.
type ProcessError struct {
	Trainer string // "trainer 1 (pid 4242)"
	Command string
	Reason  string
	Stderr  string // the last lines it wrote to stderr
}

func (e *ProcessError) Error() string {
	s := fmt.Sprintf("%s, %q, %s", e.Trainer, e.Command, e.Reason)
	if e.Stderr != "" {
		s += "; its stderr ends:\n" + indent(e.Stderr)
	} else {
		s += "; it wrote nothing to stderr"
	}
	return s
}

// TrainerError is a request that the trainer answered with an error: its
// own code failed (a Python exception, for example). The process goes on.
type TrainerError struct {
	Trainer string
	What    string // "train", "evaluate", ...
	Message string
}

func (e *TrainerError) Error() string {
	return fmt.Sprintf("%s: its %s failed:\n%s", e.Trainer, e.What, indent(e.Message))
}

// ReplyError is a reply that fedpq refuses: NaN or infinite values, a
// missing, extra or misshapen tensor, a wrong example count. The process
// goes on.
type ReplyError struct {
	Trainer string
	What    string
	Reason  string
}

func (e *ReplyError) Error() string {
	return fmt.Sprintf("%s: its %s reply refused: %s", e.Trainer, e.What, e.Reason)
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}
