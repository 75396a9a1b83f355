//go:build !purego

#include "textflag.h"

// SIGMOID(mask): Sigmoid of the 16 floats at (SI) plus the bias, stored
// at (DI) under the mask. The same operations as Sigmoid in act.go, in the
// same order, none fused. Constants: Z16 sign bit, Z17 all but the sign,
// Z18 bias, Z19 int32 127, Z20 1, Z21..Z26 the polynomial (c5..c0), Z27
// ln2Lo, Z28 ln2Hi, Z29 roundInt, Z30 -log2e, Z31 expCut.
#define SIGMOID(mask) \
	VMOVUPS.Z (SI), mask, Z0 \
	VADDPS    Z18, Z0, Z0 \ // v
	VPANDD    Z17, Z0, Z1 \ // |v|
	VMINPS    Z1, Z31, Z1 \ // a = min(|v|, expCut), NaN stays (the second source)
	VMULPS    Z30, Z1, Z2 \
	VADDPS    Z29, Z2, Z2 \ // t
	VPSUBD    Z29, Z2, Z3 \ // n
	VSUBPS    Z29, Z2, Z2 \ // f
	VPXORD    Z16, Z1, Z1 \ // -a
	VMULPS    Z28, Z2, Z4 \
	VSUBPS    Z4, Z1, Z1 \
	VMULPS    Z27, Z2, Z4 \
	VSUBPS    Z4, Z1, Z1 \ // r
	VMULPS    Z26, Z1, Z4 \
	VADDPS    Z25, Z4, Z4 \
	VMULPS    Z1, Z4, Z4 \
	VADDPS    Z24, Z4, Z4 \
	VMULPS    Z1, Z4, Z4 \
	VADDPS    Z23, Z4, Z4 \
	VMULPS    Z1, Z4, Z4 \
	VADDPS    Z22, Z4, Z4 \
	VMULPS    Z1, Z4, Z4 \
	VADDPS    Z21, Z4, Z4 \ // q
	VMULPS    Z1, Z4, Z4 \
	VMULPS    Z1, Z4, Z4 \
	VADDPS    Z1, Z4, Z4 \
	VADDPS    Z20, Z4, Z4 \ // p
	VPSRAD    $1, Z3, Z5 \ // n1
	VPSUBD    Z5, Z3, Z3 \ // n - n1
	VPADDD    Z19, Z5, Z5 \
	VPSLLD    $23, Z5, Z5 \
	VPADDD    Z19, Z3, Z3 \
	VPSLLD    $23, Z3, Z3 \
	VMULPS    Z5, Z4, Z4 \
	VMULPS    Z3, Z4, Z4 \ // e
	VPSRAD    $31, Z0, Z5 \ // all ones where v < 0
	VPANDD    Z5, Z4, Z6 \
	VPANDND   Z20, Z5, Z7 \
	VPORD     Z7, Z6, Z6 \ // e where v < 0, else 1
	VADDPS    Z20, Z4, Z4 \
	VDIVPS    Z4, Z6, Z6 \
	VMOVUPS   Z6, mask, (DI)

#define BCAST(c, z) MOVL $c, AX; VPBROADCASTD AX, z

// func sigmoidRowsAVX512(dst *float32, ldd int, src *float32, lds int, rows, width int, bias float32)
TEXT ·sigmoidRowsAVX512(SB), NOSPLIT, $0-52
	MOVQ dst+0(FP), R8
	MOVQ ldd+8(FP), R9
	MOVQ src+16(FP), R10
	MOVQ lds+24(FP), R11
	MOVQ rows+32(FP), R12
	MOVQ width+40(FP), R13
	VBROADCASTSS bias+48(FP), Z18
	SHLQ $2, R9
	SHLQ $2, R11
	TESTQ R12, R12
	JLE   done
	TESTQ R13, R13
	JLE   done

	BCAST(0x80000000, Z16)
	BCAST(0x7fffffff, Z17)
	BCAST(127, Z19)
	BCAST(0x3f800000, Z20) // 1
	BCAST(0x3f000000, Z21) // c5
	BCAST(0x3e2aaaaa, Z22) // c4
	BCAST(0x3d2aa9c1, Z23) // c3
	BCAST(0x3c088908, Z24) // c2
	BCAST(0x3ab743ce, Z25) // c1
	BCAST(0x39506967, Z26) // c0
	BCAST(0xb95e8083, Z27) // ln2Lo
	BCAST(0x3f318000, Z28) // ln2Hi
	BCAST(0x4b400000, Z29) // roundInt
	BCAST(0xbfb8aa3b, Z30) // -log2e
	BCAST(0x42d00000, Z31) // expCut

	// K1 masks a row's last vector: its ((width-1)&15)+1 floats; K2 all 16.
	LEAQ  -1(R13), CX
	ANDQ  $15, CX
	INCQ  CX
	MOVL  $1, AX
	SHLXL CX, AX, AX
	DECL  AX
	KMOVW AX, K1
	MOVL  $0xffff, AX
	KMOVW AX, K2

row:
	MOVQ R10, SI
	MOVQ R8, DI
	MOVQ R13, CX

vec:
	CMPQ CX, $16
	JLE  last
	SIGMOID(K2)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JMP  vec

last:
	SIGMOID(K1)
	ADDQ R11, R10
	ADDQ R9, R8
	DECQ R12
	JNZ  row

done:
	VZEROUPPER
	RET
