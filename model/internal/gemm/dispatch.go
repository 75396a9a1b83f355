package gemm

// override, when set, is the micro-kernel current returns instead of the
// fastest one; tests use it to check every kernel the machine can run.
var override *kernel

// current is the micro-kernel to use.
func current() *kernel {
	if override != nil {
		return override
	}
	return runnable[0]
}
