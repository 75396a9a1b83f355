package gemm

import (
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// TestMeasure prints the GFLOP/s tables of README.md. Benchmarks time the
// wall clock, which on a shared machine also counts other processes' time
// slices; for the single-thread table this takes instead the best of
// several runs of the calling thread's own CPU time (Linux's
// CLOCK_THREAD_CPUTIME_ID). MulParallel's speed-up needs the wall clock:
// its table puts Mul's best wall-clock run next to it, and adds the
// GFLOP/s per CPU-second of all the process's threads, which shows what
// splitting costs even when the machine is too busy to give both cores at
// once. Run it with
//
//	GEMM_MEASURE=. go test -run TestMeasure -v ./model/internal/gemm
//
// (the variable is a regular expression selecting the rows).
func TestMeasure(t *testing.T) {
	pat := os.Getenv("GEMM_MEASURE")
	if pat == "" {
		t.Skip("set GEMM_MEASURE to a regexp of the shapes to measure")
	}
	re := regexp.MustCompile(pat)
	var names []string
	for _, k := range runnable {
		names = append(names, kernelName(k))
	}
	var out strings.Builder
	fmt.Fprintf(&out, "| m x k x n (layouts) | %s |\n|---|%s\n", strings.Join(names, " | "), strings.Repeat("---:|", len(names)))
	for _, bc := range benchCases {
		if !re.MatchString(bc.String()) {
			continue
		}
		a, b, c := benchOperands(bc)
		fmt.Fprintf(&out, "| %v |", bc)
		for _, k := range runnable {
			var g float64
			withKernel(k, func() { g = best(threadCPU, bc.flops(), func() { Mul(c, bc.n, a, b, 1, 0) }) })
			fmt.Fprintf(&out, " %.1f |", g)
		}
		fmt.Fprintln(&out)
	}
	fmt.Fprintf(&out, "\n| m x k x n (layouts) | Mul | MulParallel, 2 threads | MulParallel per CPU-second |\n|---|---:|---:|---:|\n")
	for _, bc := range benchCases {
		if !re.MatchString(bc.String()) || !parallelCase(bc) {
			continue
		}
		a, b, c := benchOperands(bc)
		g1 := best(nil, bc.flops(), func() { Mul(c, bc.n, a, b, 1, 0) })
		g2 := best(nil, bc.flops(), func() { MulParallel(2, c, bc.n, a, b, 1, 0) })
		g3 := best(processCPU, bc.flops(), func() { MulParallel(2, c, bc.n, a, b, 1, 0) })
		fmt.Fprintf(&out, "| %v | %.1f | %.1f | %.1f |\n", bc, g1, g2, g3)
	}
	fmt.Print(out.String())
}

// threadCPU is the calling thread's CPU time.
func threadCPU() time.Duration {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 3 /* CLOCK_THREAD_CPUTIME_ID */, uintptr(unsafe.Pointer(&ts)), 0)
	return time.Duration(ts.Nano())
}

// processCPU is the process's CPU time, all threads together.
func processCPU() time.Duration {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 2 /* CLOCK_PROCESS_CPUTIME_ID */, uintptr(unsafe.Pointer(&ts)), 0)
	return time.Duration(ts.Nano())
}

var start = time.Now()

// wall is the time since start.
func wall() time.Duration { return time.Since(start) }

// best runs f in batches of at least 5ms of clock time and returns the
// best batch's GFLOP/s, f doing flops floating-point operations. The wall
// clock gets more batches: on a loaded machine it takes a while to catch
// both cores free.
func best(clock func() time.Duration, flops float64, f func()) float64 {
	reps := 7
	if clock == nil {
		clock, reps = wall, 40
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f()
	n := 1
	for {
		t0 := clock()
		for range n {
			f()
		}
		if clock()-t0 > 5*time.Millisecond {
			break
		}
		n *= 2
	}
	g := 0.0
	for range reps {
		t0 := clock()
		for range n {
			f()
		}
		g = max(g, flops*float64(n)/(clock()-t0).Seconds()/1e9)
	}
	return g
}
