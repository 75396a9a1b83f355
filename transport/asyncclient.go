package transport

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	pb "github.com/fedpq/fedpq/transport/fedpqpb"
)

// A client of an asynchronous run (mode async) trains when the server
// gives it a Task, says Ready, and holds its weights until a buffer's
// RoundStart asks for them: then it encodes them against the model it
// trained from and uploads as in a round (Client.round). It keeps them
// until the server gives it its next Task (sent once the buffer that used
// them is recorded) or discards them, so that weights held across a lost
// connection or a server restart are announced again in its next Join,
// and no trained update is lost to a restart.

// heldWeights are a client's trained weights, not yet used by a buffer
// that ended.
type heldWeights struct {
	run      string // the run's id
	version  uint32 // the model version trained from
	base     [][]float32
	local    [][]float32
	loss     float64 // sent in the buffer's Upload: 0 where the run keeps losses private
	uploaded uint32  // the buffer they were uploaded in, 0 if none yet
}

// tasked reports whether the client's server gives it Tasks, and its
// rounds ask for the weights it trained and holds: an asynchronous run,
// or a synchronous one that over-selects (the server keeps the first of
// its round's sample to finish).
func (c *Client) tasked() bool {
	return c.su.Config.Mode == "async" || c.su.Config.OverSelect > 0
}

// announced is the Ready a Join carries: the weights the client holds for
// run runID, if it holds any.
func (c *Client) announced(runID []byte) *pb.Ready {
	h := c.held
	if h == nil || h.run != string(runID) {
		return nil
	}
	return &pb.Ready{Version: h.version, Uploaded: h.uploaded}
}

// task trains from the Task's model, waits the client's delay, and says
// Ready; the weights it held before are dropped (the server gives a task
// only once they are used). A Discard of the task (withdrawn past the
// server's task timeout) that comes while the client waits its delay
// ends the task at once, its work dropped, with the late Ready the server
// awaits before it gives the client a next Task. Another message that ends the wait (the run finished) is
// returned for the session to act on, the task dropped.
func (c *Client) task(ctx context.Context, stream pb.Federation_SessionClient, in <-chan *pb.ServerMessage, runID []byte, tk *pb.Task) (*pb.ServerMessage, error) {
	c.held = nil
	v := tk.GetVersion()
	global, err := decodeTensors(tk.GetGlobal(), c.specs)
	if err != nil {
		return nil, fmt.Errorf("task from model version %d: the global model: %w", v, err) // the session ends: the server frees its slot
	}
	start := time.Now()
	local, loss, err := c.train(ctx, v+1, global, time.Time{})
	if err != nil {
		if c.su.Pool != nil && ctx.Err() == nil {
			c.log.Printf("task from model version %d: local training failed: %v", v, trainerFailure(err))
			return nil, errors.New("local training failed") // the session ends: the server frees its slot
		}
		return nil, &setupError{err}
	}
	trained := time.Since(start)
	c.cfg.Metrics.trained(trained)
	if lossPrivate(c.su.Config) {
		loss = 0 // computed on the client's data, and not privatized
	}
	if d := c.cfg.Delay.wait(c.runSecret, c.cfg.ID, c.cfg.Clients, int(v)); d > 0 {
		if next, waited, err := c.delay(ctx, in, v, d); !waited {
			if next == nil && err == nil {
				// Withdrawn: the work is dropped, and the Ready the
				// server awaits says the client is idle (it is ignored,
				// at no cost), so that it gets a next Task.
				_ = stream.Send(&pb.ClientMessage{Body: &pb.ClientMessage_Ready{Ready: &pb.Ready{Version: v}}})
			}
			return next, err
		}
	}
	c.held = &heldWeights{run: string(runID), version: v, base: global, local: local, loss: loss}
	c.routine("task from model version %d: trained in %v, ready after %v", v, trained.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	// A stream that ended meanwhile (the run finished, the server went)
	// says why to the session's reader: the weights are announced again
	// if the client joins again.
	_ = stream.Send(&pb.ClientMessage{Body: &pb.ClientMessage_Ready{Ready: &pb.Ready{Version: v}}})
	return nil, nil
}

// delay waits d after training the task of model version v, reading the
// server's messages meanwhile; waited is false if something ended the
// wait first: the task's Discard (no message, no error), another
// message the session must act on (returned), or the context (its error).
func (c *Client) delay(ctx context.Context, in <-chan *pb.ServerMessage, v uint32, d time.Duration) (next *pb.ServerMessage, waited bool, err error) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
			return nil, true, nil
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case m, ok := <-in:
			if !ok {
				// The connection is lost: the weights are trained, so the
				// client waits on, holds them and announces them in its
				// next Join, as after any task.
				in = nil
				continue
			}
			switch b := m.GetBody().(type) {
			case *pb.ServerMessage_Discard:
				c.discard(b.Discard)
				if b.Discard.GetVersion() == v {
					return nil, false, nil // withdrawn: idle for the next Task
				}
			case *pb.ServerMessage_Receipt:
				c.receipt(b.Receipt)
			default:
				return m, false, nil
			}
		}
	}
}

// used drops the held weights if they went into a buffer of the done
// ones: that buffer used them (or, secure and below its threshold, lost
// them), and the Join announced them for nothing.
func (c *Client) used(done uint32) {
	if h := c.held; h != nil && h.uploaded != 0 && h.uploaded <= done {
		c.held = nil
	}
}

// discard drops the held weights the server will not use, and logs why.
func (c *Client) discard(d *pb.Discard) {
	if c.held != nil && c.held.version == d.GetVersion() {
		c.held = nil
	}
	c.note(d.GetVersion()+1, func(s *fleetStats) *atomic.Int64 { return &s.refused })
	c.cfg.Metrics.uploadRefused()
	c.log.Printf("update from model version %d refused: %s", d.GetVersion(), d.GetReason())
}

// heldFor is the held weights a buffer's (or an over-selected round's)
// RoundStart asks for. Weights
// uploaded in a buffer the server lost to a restart go again only into
// the buffer of the same number (Client.round sends the very same upload
// again): a fresh message of them in another buffer would be a second
// message of the same weights that no ledger counts.
func (c *Client) heldFor(runID []byte, rs *pb.RoundStart) (*heldWeights, error) {
	h, t := c.held, rs.GetRound()
	step := "buffer"
	if c.su.Config.Mode != "async" {
		step = "round" // over-selected
	}
	switch {
	case h == nil || h.run != string(runID):
		return nil, fmt.Errorf("%s %d asks for weights trained from model version %d, and the client holds none", step, t, rs.GetVersion())
	case h.version != rs.GetVersion():
		return nil, fmt.Errorf("%s %d asks for weights trained from model version %d; the client's are from version %d", step, t, rs.GetVersion(), h.version)
	case h.uploaded != 0 && h.uploaded != t:
		c.held = nil
		return nil, fmt.Errorf("its weights went into %s %d, which the server lost; a fresh message of them in %s %d would go uncounted by the ledger, so they are dropped", step, h.uploaded, step, t)
	}
	return h, nil
}
