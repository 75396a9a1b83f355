package transport

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestOwnData: a server that holds only the evaluation set and 4 clients
// that each read only their own file run 2 rounds; every upload counts,
// a client claiming more than max_examples is weighed as max_examples
// (and the log says so), as is a lying client claiming 2^31-1 examples,
// and the server's training set is empty. A client
// whose data do not fit the run's schema, and one that brings its own
// data to a run that partitions a shared dataset, stop at once with an
// error that says why.
func TestOwnData(t *testing.T) {
	c := runConfig(t, "corbin", 4, 2)
	dir, fed := ownFiles(t, c.Dataset, 4)
	const most = 100
	c.TestData, c.MaxExamples = filepath.Join(dir, "test.npz"), most
	ts := serve(t, ServerConfig{Run: c}, "127.0.0.1:0")
	if n := ts.srv.su.Data.Train.Len(); n != 0 || ts.srv.su.Config.Schema == nil {
		t.Fatalf("the server holds %d training examples, schema %v", n, ts.srv.su.Config.Schema)
	}
	var cs []*testClient
	for k := range 4 {
		cs = append(cs, join(t, context.Background(), ClientConfig{Server: ts.addr, ID: k, Data: filepath.Join(dir, fmt.Sprintf("client-%d.npz", k))}))
	}
	ts.wait(t)
	for _, cl := range cs {
		cl.wait(t)
	}
	if got := fmt.Sprint(rounds(t, c.Dir())); got != "[4 4]" {
		t.Errorf("uploads per round %s, want [4 4]", got)
	}
	capped := 0
	for k, idx := range fed.Natural {
		m := regexp.MustCompile(fmt.Sprintf(`client %d joined from \S+ \((\d+) examples(, weighed as (\d+): max_examples)?\)`, k)).FindStringSubmatch(ts.log.String())
		if m == nil {
			t.Fatalf("no join of client %d", k)
		}
		claim, _ := strconv.Atoi(m[1])
		if claim != len(idx) || (len(idx) > most) != (m[3] == strconv.Itoa(most)) {
			t.Errorf("client %d of %d examples: %q", k, len(idx), m[0])
		}
		if len(idx) > most {
			capped++
		}
	}
	if capped == 0 {
		t.Errorf("no client holds more than %d examples: the cap went untested", most)
	}

	// A client whose data are not the run's shape.
	other := filepath.Join(t.TempDir(), "client-0.csv")
	os.WriteFile(other, []byte("a,label\n1,0\n"), 0o644)
	c.Out = t.TempDir()
	ts = serve(t, ServerConfig{Run: c}, "127.0.0.1:0")
	bad := join(t, context.Background(), ClientConfig{Server: ts.addr, ID: 0, Data: other})
	ended(t, bad.done, "client")
	if bad.err == nil || !strings.Contains(bad.err.Error(), "the run's examples are arrays or images of shape [60]") {
		t.Errorf("a client with data of another shape: %v", bad.err)
	}
	// A client that claims 2^31-1 examples weighs max_examples.
	if err := dial(t, ts.addr).joinClaiming(1, 4, token, math.MaxInt32); err != nil {
		t.Fatal(err)
	}
	claimed := regexp.MustCompile(`client 1 joined from \S+ \(2147483647 examples, weighed as 100: max_examples\)`)
	for start := time.Now(); !claimed.MatchString(ts.log.String()); time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > 5*time.Second { // the log line follows the Welcome
			t.Fatalf("a claim of 2147483647 examples: no line %q in the log", claimed)
		}
	}
	ts.cancel()

	// Its own data to a run that partitions a shared dataset.
	p := runConfig(t, "corbin", 4, 1)
	ts = serve(t, ServerConfig{Run: p}, "127.0.0.1:0")
	bad = join(t, context.Background(), ClientConfig{Server: ts.addr, ID: 0, Data: filepath.Join(dir, "client-0.npz")})
	ended(t, bad.done, "client")
	if bad.err == nil || !strings.Contains(bad.err.Error(), "give --partition K/N") {
		t.Errorf("own data on a partitioned run: %v", bad.err)
	}
	ts.cancel()
}
