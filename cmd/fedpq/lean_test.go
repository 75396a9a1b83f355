package main

import (
	"net"
	"path/filepath"
	"testing"
	"time"
)

// mnistTestBytes is MNIST's test set as the server holds it: 10,000
// images of 28x28 float32 pixels.
const mnistTestBytes = 10000 * 28 * 28 * 4

// serverPeakLimit is issue 34's bound on a server's resident memory
// before any client joins, in bytes: the test set it evaluates on, the
// model and 50 MB (MB here: 2^20 bytes, as scripts/deploy-memory.sh
// counts them).
func serverPeakLimit(testBytes, params int) float64 { return float64(testBytes + 4*params + 50<<20) }

// checkServerPeak fails t if the server, listening and with no client
// yet, has been resident above limit at its peak (VmHWM).
func checkServerPeak(t *testing.T, server *proc, limit float64) {
	t.Helper()
	peak := procStatus(server, "VmHWM")
	t.Logf("server's peak resident memory before any client joined: %.1f MB (limit %.1f MB)", peak/(1<<20), limit/(1<<20))
	if peak == 0 || peak > limit {
		t.Errorf("server: peak resident memory %.1f MB before any client joined, want at most %.1f MB (the test set, the model and 50 MB)", peak/(1<<20), limit/(1<<20))
	}
}

// TestServerMemory: fedpq server --dataset mnist, for 3,000 clients, reads
// only the test set it evaluates on (the training set's labels to
// partition it, not its images): its peak resident memory before any
// client joins stays within the test set, the model and 50 MB. It was
// 354-359 MB when the server read the whole training set, 71 MB after
// (the fedpq binary, 2026-11-29; docs/cluster.md).
func TestServerMemory(t *testing.T) {
	dataDir := sharedDatasets(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	server := start(t, "server", "server", "--dataset", "mnist", "--data-dir", dataDir, "--clients", "3000", "--model", "mlp",
		"--out", filepath.Join(t.TempDir(), "run"), "--listen", addr, "--token", "lean")
	server.await(t, "listening on", time.Minute)
	checkServerPeak(t, server, serverPeakLimit(mnistTestBytes, 25818))
}
