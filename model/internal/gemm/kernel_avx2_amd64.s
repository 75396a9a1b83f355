//go:build !purego

#include "textflag.h"

// ZERO12 clears the accumulators Y0-Y11.
#define ZERO12 \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3; \
	VXORPS Y4, Y4, Y4; \
	VXORPS Y5, Y5, Y5; \
	VXORPS Y6, Y6, Y6; \
	VXORPS Y7, Y7, Y7; \
	VXORPS Y8, Y8, Y8; \
	VXORPS Y9, Y9, Y9; \
	VXORPS Y10, Y10, Y10; \
	VXORPS Y11, Y11, Y11

// FMA6x16 adds to the 6x16 tile in Y0-Y11 the outer product of 6 values of
// A, at a, a+R8, a+2 R8, a+R9 (3 rows), a+4 R8 and a+R10 (5 rows), and the
// 16 of B in Y12-Y13, broadcasting A through Y14-Y15.
#define FMA6x16(a) \
	VBROADCASTSS (a), Y14; \
	VFMADD231PS Y12, Y14, Y0; \
	VFMADD231PS Y13, Y14, Y1; \
	VBROADCASTSS (a)(R8*1), Y15; \
	VFMADD231PS Y12, Y15, Y2; \
	VFMADD231PS Y13, Y15, Y3; \
	VBROADCASTSS (a)(R8*2), Y14; \
	VFMADD231PS Y12, Y14, Y4; \
	VFMADD231PS Y13, Y14, Y5; \
	VBROADCASTSS (a)(R9*1), Y15; \
	VFMADD231PS Y12, Y15, Y6; \
	VFMADD231PS Y13, Y15, Y7; \
	VBROADCASTSS (a)(R8*4), Y14; \
	VFMADD231PS Y12, Y14, Y8; \
	VFMADD231PS Y13, Y14, Y9; \
	VBROADCASTSS (a)(R10*1), Y15; \
	VFMADD231PS Y12, Y15, Y10; \
	VFMADD231PS Y13, Y15, Y11

// AVX2 micro-kernel: a 6x16 tile of C in 12 ymm accumulators (Y0-Y11,
// row i in Y2i, Y2i+1), B in Y12-Y13, A broadcasts in Y14-Y15: all sixteen
// registers. A addressing and write-out as in the AVX-512 kernel.

// func kernelAVX2(k int, a *float32, sa, sp int, b, c *float32, ldc int, alpha, beta float32)
TEXT ·kernelAVX2(SB), NOSPLIT, $0-64
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), AX
	MOVQ sa+16(FP), R8
	MOVQ sp+24(FP), R11
	MOVQ b+32(FP), BX
	MOVQ c+40(FP), DI
	MOVQ ldc+48(FP), DX
	SHLQ $2, R8           // row stride of A in bytes
	LEAQ (R8)(R8*2), R9   // 3 rows
	LEAQ (R8)(R8*4), R10  // 5 rows
	SHLQ $2, R11          // k stride of A in bytes
	SHLQ $2, DX
	ZERO12
	TESTQ CX, CX
	JEQ  kernelAVX2_store

kernelAVX2_loop:
	VMOVUPS 0(BX), Y12
	VMOVUPS 32(BX), Y13
	FMA6x16(AX)
	ADDQ R11, AX
	ADDQ $64, BX
	DECQ CX
	JNE  kernelAVX2_loop

kernelAVX2_store:
	VBROADCASTSS alpha+56(FP), Y14
	VBROADCASTSS beta+60(FP), Y15
	MOVL beta+60(FP), R12
	ANDL $0x7fffffff, R12 // beta == 0, either sign: do not read C
	JEQ  kernelAVX2_store0
	VMULPS Y14, Y0, Y0
	VMULPS 0(DI), Y15, Y12
	VADDPS Y12, Y0, Y0
	VMOVUPS Y0, 0(DI)
	VMULPS Y14, Y1, Y1
	VMULPS 32(DI), Y15, Y12
	VADDPS Y12, Y1, Y1
	VMOVUPS Y1, 32(DI)
	ADDQ DX, DI
	VMULPS Y14, Y2, Y2
	VMULPS 0(DI), Y15, Y12
	VADDPS Y12, Y2, Y2
	VMOVUPS Y2, 0(DI)
	VMULPS Y14, Y3, Y3
	VMULPS 32(DI), Y15, Y12
	VADDPS Y12, Y3, Y3
	VMOVUPS Y3, 32(DI)
	ADDQ DX, DI
	VMULPS Y14, Y4, Y4
	VMULPS 0(DI), Y15, Y12
	VADDPS Y12, Y4, Y4
	VMOVUPS Y4, 0(DI)
	VMULPS Y14, Y5, Y5
	VMULPS 32(DI), Y15, Y12
	VADDPS Y12, Y5, Y5
	VMOVUPS Y5, 32(DI)
	ADDQ DX, DI
	VMULPS Y14, Y6, Y6
	VMULPS 0(DI), Y15, Y12
	VADDPS Y12, Y6, Y6
	VMOVUPS Y6, 0(DI)
	VMULPS Y14, Y7, Y7
	VMULPS 32(DI), Y15, Y12
	VADDPS Y12, Y7, Y7
	VMOVUPS Y7, 32(DI)
	ADDQ DX, DI
	VMULPS Y14, Y8, Y8
	VMULPS 0(DI), Y15, Y12
	VADDPS Y12, Y8, Y8
	VMOVUPS Y8, 0(DI)
	VMULPS Y14, Y9, Y9
	VMULPS 32(DI), Y15, Y12
	VADDPS Y12, Y9, Y9
	VMOVUPS Y9, 32(DI)
	ADDQ DX, DI
	VMULPS Y14, Y10, Y10
	VMULPS 0(DI), Y15, Y12
	VADDPS Y12, Y10, Y10
	VMOVUPS Y10, 0(DI)
	VMULPS Y14, Y11, Y11
	VMULPS 32(DI), Y15, Y12
	VADDPS Y12, Y11, Y11
	VMOVUPS Y11, 32(DI)
	VZEROUPPER
	RET

kernelAVX2_store0:
	VMULPS Y14, Y0, Y0
	VMOVUPS Y0, 0(DI)
	VMULPS Y14, Y1, Y1
	VMOVUPS Y1, 32(DI)
	ADDQ DX, DI
	VMULPS Y14, Y2, Y2
	VMOVUPS Y2, 0(DI)
	VMULPS Y14, Y3, Y3
	VMOVUPS Y3, 32(DI)
	ADDQ DX, DI
	VMULPS Y14, Y4, Y4
	VMOVUPS Y4, 0(DI)
	VMULPS Y14, Y5, Y5
	VMOVUPS Y5, 32(DI)
	ADDQ DX, DI
	VMULPS Y14, Y6, Y6
	VMOVUPS Y6, 0(DI)
	VMULPS Y14, Y7, Y7
	VMOVUPS Y7, 32(DI)
	ADDQ DX, DI
	VMULPS Y14, Y8, Y8
	VMOVUPS Y8, 0(DI)
	VMULPS Y14, Y9, Y9
	VMOVUPS Y9, 32(DI)
	ADDQ DX, DI
	VMULPS Y14, Y10, Y10
	VMOVUPS Y10, 0(DI)
	VMULPS Y14, Y11, Y11
	VMOVUPS Y11, 32(DI)
	VZEROUPPER
	RET

// convPairsAVX2 computes a 6x16 tile of C = A*B with B read in place, as
// convPairsAVX512 does a 6x64 one: A(i, p) = a[i*sa+p], B(p, col) =
// in[offs[p]+col], for k >= 1 steps p; the tile's 16 columns are 2 blocks
// of 8 contiguous ones, block q at B column offset bo[q] and C column
// co[q]. Every element is one FMA chain over p in order from 0, stored as
// is: the bits of Mul with alpha 1, beta 0 and k in one block. Registers
// as in kernelAVX2.
//
// func convPairsAVX2(a *float32, sa int, in *float32, offs *int, k int, bo *int, c *float32, ldc int, co *int)
TEXT ·convPairsAVX2(SB), NOSPLIT, $0-72
	MOVQ a+0(FP), DX
	MOVQ sa+8(FP), R8
	SHLQ $2, R8
	LEAQ (R8)(R8*2), R9  // 3 rows
	LEAQ (R8)(R8*4), R10 // 5 rows
	MOVQ in+16(FP), SI
	MOVQ offs+24(FP), CX
	MOVQ k+32(FP), BX
	MOVQ bo+40(FP), R11
	MOVQ 0(R11), R12
	MOVQ 8(R11), R13
	ZERO12

convPairsAVX2_step:
	MOVQ (CX), AX
	LEAQ (SI)(AX*4), AX
	ADDQ $8, CX
	VMOVUPS (AX)(R12*4), Y12
	VMOVUPS (AX)(R13*4), Y13
	FMA6x16(DX)
	ADDQ $4, DX
	DECQ BX
	JNE  convPairsAVX2_step

	MOVQ c+48(FP), AX
	MOVQ ldc+56(FP), R8
	SHLQ $2, R8
	MOVQ co+64(FP), R11
	MOVQ 0(R11), R12
	MOVQ 8(R11), R13
	LEAQ (AX)(R12*4), DI
	LEAQ (AX)(R13*4), SI
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, (SI)
	ADDQ R8, DI
	ADDQ R8, SI
	VMOVUPS Y2, (DI)
	VMOVUPS Y3, (SI)
	ADDQ R8, DI
	ADDQ R8, SI
	VMOVUPS Y4, (DI)
	VMOVUPS Y5, (SI)
	ADDQ R8, DI
	ADDQ R8, SI
	VMOVUPS Y6, (DI)
	VMOVUPS Y7, (SI)
	ADDQ R8, DI
	ADDQ R8, SI
	VMOVUPS Y8, (DI)
	VMOVUPS Y9, (SI)
	ADDQ R8, DI
	ADDQ R8, SI
	VMOVUPS Y10, (DI)
	VMOVUPS Y11, (SI)
	VZEROUPPER
	RET
