//go:build !purego

package act

import "golang.org/x/sys/cpu"

// sigmoidRowsAVX512 is SigmoidRows in AVX-512 (strides in floats), 16
// lanes a vector, the last vector of each row under a mask. Offsets are
// not checked.
//
//go:noescape
func sigmoidRowsAVX512(dst *float32, ldd int, src *float32, lds int, rows, width int, bias float32)

// haveAVX512 says sigmoidRowsAVX512 runs (it also uses BMI2); a variable so
// that tests can check the Go path too.
var haveAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasBMI2
