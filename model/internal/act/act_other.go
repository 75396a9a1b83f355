//go:build !amd64 || purego

package act

// haveAVX512 is false: no assembly in this build.
var haveAVX512 = false

// sigmoidRowsAVX512 is the AVX-512 loop, absent here.
func sigmoidRowsAVX512(dst *float32, ldd int, src *float32, lds int, rows, width int, bias float32) {
	panic("act: no AVX-512")
}
