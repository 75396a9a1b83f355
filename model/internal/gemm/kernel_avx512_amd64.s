//go:build !purego

#include "textflag.h"

// AVX-512 micro-kernel: a 6x64 tile of C in 24 zmm accumulators (Z0-Z23,
// row i in Z4i..Z4i+3). Each k step loads 64 values of packed B (Z24-Z27)
// and broadcasts 6 values of A, for 24 FMAs. Zen 4 issues one 512-bit FMA
// per cycle with 4 cycles' latency, so 24 independent chains keep it busy,
// and the 10 loads per step fit its load ports.
//
// Partial tiles run a loop over only the vectors (cols <= 48, 32, 16: 3, 2,
// 1 per row) and rows (rows <= 4, 2) they need, so a thin C (n = 10 or 32,
// m = 32 or 10) does not pay for the full tile. With 2 or 1 vectors per row
// A is broadcast inside the FMA (embedded broadcast): a separate
// VBROADCASTSS per one or two FMAs holds the 1-vector loop to 70% of peak
// on Zen 4, the embedded form runs it at full speed. The last vector of
// each row is written under a mask (K1) and rows past rows are not written,
// so partial tiles go straight to C.
//
// A element (i, p) is read at a + i*sa + p*sp (in floats): packed panels
// have sa = 1, sp = 6, but dense A (sa = lda, sp = 1) and transposed dense A
// (sa = 1, sp = lda) are read in place, unpacked. B is packed, 64 floats
// per k step whatever cols is.
//
// Write-out: C = alpha*acc, or alpha*acc + beta*C with both products rounded
// before the add, exactly as writeTile does in Go (alpha == 1 skips the
// multiplication, which changes no bits).

// A's rows i = 0..5 at the current k step.
#define A0 (AX)
#define A1 (AX)(R8*1)
#define A2 (AX)(R8*2)
#define A3 (AX)(R9*1)
#define A4 (AX)(R8*4)
#define A5 (AX)(R10*1)

// One k step of one row with nv = 4, 3 vectors of B in Z24..: broadcast A's
// value into b, then one FMA per vector. With 2 and 1 vectors the
// broadcast is embedded in the FMAs.
#define FMA4(a, b, c0, c1, c2, c3) \
	VBROADCASTSS a, b; VFMADD231PS Z24, b, c0; VFMADD231PS Z25, b, c1; VFMADD231PS Z26, b, c2; VFMADD231PS Z27, b, c3
#define FMA3(a, b, c0, c1, c2) \
	VBROADCASTSS a, b; VFMADD231PS Z24, b, c0; VFMADD231PS Z25, b, c1; VFMADD231PS Z26, b, c2
#define FMA2(a, c0, c1) \
	VFMADD231PS.BCST a, Z24, c0; VFMADD231PS.BCST a, Z25, c1
#define FMA1(a, c0) \
	VFMADD231PS.BCST a, Z24, c0

// Storing one vector of a row at off(DI): STB* computes alpha*c + beta*C,
// STA* alpha*c, STP* stores c as it is; *L is for the row's last vector,
// stored under the mask K1 (alpha in Z28, beta in Z29, Z30 scratch).
#define STB(c, off) VMULPS Z28, c, c; VMULPS off(DI), Z29, Z30; VADDPS Z30, c, c; VMOVUPS c, off(DI)
#define STBL(c, off) VMULPS Z28, c, c; VMOVUPS.Z off(DI), K1, Z30; VMULPS Z29, Z30, Z30; VADDPS Z30, c, c; VMOVUPS c, K1, off(DI)
#define STA(c, off) VMULPS Z28, c, c; VMOVUPS c, off(DI)
#define STAL(c, off) VMULPS Z28, c, c; VMOVUPS c, K1, off(DI)
#define STP(c, off) VMOVUPS c, off(DI)
#define STPL(c, off) VMOVUPS c, K1, off(DI)

// Rows of 4, 3, 2, 1 vectors (accumulators c0..) with stores S, SL.
#define ROW4(S, SL, c0, c1, c2, c3) S(c0, 0); S(c1, 64); S(c2, 128); SL(c3, 192)
#define ROW3(S, SL, c0, c1, c2) S(c0, 0); S(c1, 64); SL(c2, 128)
#define ROW2(S, SL, c0, c1) S(c0, 0); SL(c1, 64)
#define ROW1(S, SL, c0) SL(c0, 0)

// NEXTROW moves DI to row i, unless the tile has only i rows.
#define NEXTROW(i) CMPQ R13, $i; JLE done; ADDQ DX, DI

// func kernelAVX512(k int, a *float32, sa, sp int, b, c *float32, ldc, rows, cols int, alpha, beta float32)
TEXT ·kernelAVX512(SB), NOSPLIT, $0-80
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), AX
	MOVQ sa+16(FP), R8
	MOVQ sp+24(FP), R11
	MOVQ b+32(FP), BX
	MOVQ c+40(FP), DI
	MOVQ ldc+48(FP), DX
	MOVQ rows+56(FP), R13
	MOVQ cols+64(FP), R14
	SHLQ $2, R8          // row stride of A in bytes
	LEAQ (R8)(R8*2), R9  // 3 rows
	LEAQ (R8)(R8*4), R10 // 5 rows
	SHLQ $2, R11         // k stride of A in bytes
	SHLQ $2, DX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23

	// K1 masks the last vector of a row: its ((cols-1)&15)+1 columns.
	LEAQ -1(R14), R12
	ANDQ $15, R12
	INCQ R12
	MOVL $1, R15
	SHLXL R12, R15, R15
	DECL R15
	KMOVW R15, K1

	// Pick the loop for the rows and vectors the tile needs.
	CMPQ R13, $2
	JLE  rows2
	CMPQ R13, $4
	JLE  rows4
	CMPQ R14, $48
	JGT  loop6x4
	CMPQ R14, $32
	JGT  loop6x3
	CMPQ R14, $16
	JGT  loop6x2
	JMP  loop6x1

rows4:
	CMPQ R14, $48
	JGT  loop4x4
	CMPQ R14, $32
	JGT  loop4x3
	CMPQ R14, $16
	JGT  loop4x2
	JMP  loop4x1

rows2:
	CMPQ R14, $48
	JGT  loop2x4
	CMPQ R14, $32
	JGT  loop2x3
	CMPQ R14, $16
	JGT  loop2x2
	JMP  loop2x1

loop6x4:
	TESTQ CX, CX
	JEQ  store4

loop6x4_k:
	VMOVUPS 0(BX), Z24
	VMOVUPS 64(BX), Z25
	VMOVUPS 128(BX), Z26
	VMOVUPS 192(BX), Z27
	FMA4(A0, Z28, Z0, Z1, Z2, Z3)
	FMA4(A1, Z29, Z4, Z5, Z6, Z7)
	FMA4(A2, Z30, Z8, Z9, Z10, Z11)
	FMA4(A3, Z31, Z12, Z13, Z14, Z15)
	FMA4(A4, Z28, Z16, Z17, Z18, Z19)
	FMA4(A5, Z29, Z20, Z21, Z22, Z23)
	ADDQ R11, AX
	ADDQ $256, BX
	DECQ CX
	JNE  loop6x4_k
	JMP  store4

loop6x3:
	TESTQ CX, CX
	JEQ  store3

loop6x3_k:
	VMOVUPS 0(BX), Z24
	VMOVUPS 64(BX), Z25
	VMOVUPS 128(BX), Z26
	FMA3(A0, Z28, Z0, Z1, Z2)
	FMA3(A1, Z29, Z4, Z5, Z6)
	FMA3(A2, Z30, Z8, Z9, Z10)
	FMA3(A3, Z31, Z12, Z13, Z14)
	FMA3(A4, Z28, Z16, Z17, Z18)
	FMA3(A5, Z29, Z20, Z21, Z22)
	ADDQ R11, AX
	ADDQ $256, BX
	DECQ CX
	JNE  loop6x3_k
	JMP  store3

loop6x2:
	TESTQ CX, CX
	JEQ  store2

loop6x2_k:
	VMOVUPS 0(BX), Z24
	VMOVUPS 64(BX), Z25
	FMA2(A0, Z0, Z1)
	FMA2(A1, Z4, Z5)
	FMA2(A2, Z8, Z9)
	FMA2(A3, Z12, Z13)
	FMA2(A4, Z16, Z17)
	FMA2(A5, Z20, Z21)
	ADDQ R11, AX
	ADDQ $256, BX
	DECQ CX
	JNE  loop6x2_k
	JMP  store2

loop6x1:
	TESTQ CX, CX
	JEQ  store1

loop6x1_k:
	VMOVUPS 0(BX), Z24
	FMA1(A0, Z0)
	FMA1(A1, Z4)
	FMA1(A2, Z8)
	FMA1(A3, Z12)
	FMA1(A4, Z16)
	FMA1(A5, Z20)
	ADDQ R11, AX
	ADDQ $256, BX
	DECQ CX
	JNE  loop6x1_k
	JMP  store1

loop4x4:
	TESTQ CX, CX
	JEQ  store4

loop4x4_k:
	VMOVUPS 0(BX), Z24
	VMOVUPS 64(BX), Z25
	VMOVUPS 128(BX), Z26
	VMOVUPS 192(BX), Z27
	FMA4(A0, Z28, Z0, Z1, Z2, Z3)
	FMA4(A1, Z29, Z4, Z5, Z6, Z7)
	FMA4(A2, Z30, Z8, Z9, Z10, Z11)
	FMA4(A3, Z31, Z12, Z13, Z14, Z15)
	ADDQ R11, AX
	ADDQ $256, BX
	DECQ CX
	JNE  loop4x4_k
	JMP  store4

loop4x3:
	TESTQ CX, CX
	JEQ  store3

loop4x3_k:
	VMOVUPS 0(BX), Z24
	VMOVUPS 64(BX), Z25
	VMOVUPS 128(BX), Z26
	FMA3(A0, Z28, Z0, Z1, Z2)
	FMA3(A1, Z29, Z4, Z5, Z6)
	FMA3(A2, Z30, Z8, Z9, Z10)
	FMA3(A3, Z31, Z12, Z13, Z14)
	ADDQ R11, AX
	ADDQ $256, BX
	DECQ CX
	JNE  loop4x3_k
	JMP  store3

loop4x2:
	TESTQ CX, CX
	JEQ  store2

loop4x2_k:
	VMOVUPS 0(BX), Z24
	VMOVUPS 64(BX), Z25
	FMA2(A0, Z0, Z1)
	FMA2(A1, Z4, Z5)
	FMA2(A2, Z8, Z9)
	FMA2(A3, Z12, Z13)
	ADDQ R11, AX
	ADDQ $256, BX
	DECQ CX
	JNE  loop4x2_k
	JMP  store2

loop4x1:
	TESTQ CX, CX
	JEQ  store1

loop4x1_k:
	VMOVUPS 0(BX), Z24
	FMA1(A0, Z0)
	FMA1(A1, Z4)
	FMA1(A2, Z8)
	FMA1(A3, Z12)
	ADDQ R11, AX
	ADDQ $256, BX
	DECQ CX
	JNE  loop4x1_k
	JMP  store1

loop2x4:
	TESTQ CX, CX
	JEQ  store4

loop2x4_k:
	VMOVUPS 0(BX), Z24
	VMOVUPS 64(BX), Z25
	VMOVUPS 128(BX), Z26
	VMOVUPS 192(BX), Z27
	FMA4(A0, Z28, Z0, Z1, Z2, Z3)
	FMA4(A1, Z29, Z4, Z5, Z6, Z7)
	ADDQ R11, AX
	ADDQ $256, BX
	DECQ CX
	JNE  loop2x4_k
	JMP  store4

loop2x3:
	TESTQ CX, CX
	JEQ  store3

loop2x3_k:
	VMOVUPS 0(BX), Z24
	VMOVUPS 64(BX), Z25
	VMOVUPS 128(BX), Z26
	FMA3(A0, Z28, Z0, Z1, Z2)
	FMA3(A1, Z29, Z4, Z5, Z6)
	ADDQ R11, AX
	ADDQ $256, BX
	DECQ CX
	JNE  loop2x3_k
	JMP  store3

loop2x2:
	TESTQ CX, CX
	JEQ  store2

loop2x2_k:
	VMOVUPS 0(BX), Z24
	VMOVUPS 64(BX), Z25
	FMA2(A0, Z0, Z1)
	FMA2(A1, Z4, Z5)
	ADDQ R11, AX
	ADDQ $256, BX
	DECQ CX
	JNE  loop2x2_k
	JMP  store2

loop2x1:
	TESTQ CX, CX
	JEQ  store1

loop2x1_k:
	VMOVUPS 0(BX), Z24
	FMA1(A0, Z0)
	FMA1(A1, Z4)
	ADDQ R11, AX
	ADDQ $256, BX
	DECQ CX
	JNE  loop2x1_k
	JMP  store1

store4:
	VBROADCASTSS alpha+72(FP), Z28
	VBROADCASTSS beta+76(FP), Z29
	MOVL beta+76(FP), R12
	ANDL $0x7fffffff, R12 // beta == 0, either sign: do not read C
	JEQ  store4_beta0
	ROW4(STB, STBL, Z0, Z1, Z2, Z3)
	NEXTROW(1)
	ROW4(STB, STBL, Z4, Z5, Z6, Z7)
	NEXTROW(2)
	ROW4(STB, STBL, Z8, Z9, Z10, Z11)
	NEXTROW(3)
	ROW4(STB, STBL, Z12, Z13, Z14, Z15)
	NEXTROW(4)
	ROW4(STB, STBL, Z16, Z17, Z18, Z19)
	NEXTROW(5)
	ROW4(STB, STBL, Z20, Z21, Z22, Z23)
	JMP  done

store4_beta0:
	MOVL alpha+72(FP), R12
	CMPL R12, $0x3f800000 // alpha == 1: plain stores
	JEQ  store4_plain
	ROW4(STA, STAL, Z0, Z1, Z2, Z3)
	NEXTROW(1)
	ROW4(STA, STAL, Z4, Z5, Z6, Z7)
	NEXTROW(2)
	ROW4(STA, STAL, Z8, Z9, Z10, Z11)
	NEXTROW(3)
	ROW4(STA, STAL, Z12, Z13, Z14, Z15)
	NEXTROW(4)
	ROW4(STA, STAL, Z16, Z17, Z18, Z19)
	NEXTROW(5)
	ROW4(STA, STAL, Z20, Z21, Z22, Z23)
	JMP  done

store4_plain:
	ROW4(STP, STPL, Z0, Z1, Z2, Z3)
	NEXTROW(1)
	ROW4(STP, STPL, Z4, Z5, Z6, Z7)
	NEXTROW(2)
	ROW4(STP, STPL, Z8, Z9, Z10, Z11)
	NEXTROW(3)
	ROW4(STP, STPL, Z12, Z13, Z14, Z15)
	NEXTROW(4)
	ROW4(STP, STPL, Z16, Z17, Z18, Z19)
	NEXTROW(5)
	ROW4(STP, STPL, Z20, Z21, Z22, Z23)
	JMP  done

store3:
	VBROADCASTSS alpha+72(FP), Z28
	VBROADCASTSS beta+76(FP), Z29
	MOVL beta+76(FP), R12
	ANDL $0x7fffffff, R12 // beta == 0, either sign: do not read C
	JEQ  store3_beta0
	ROW3(STB, STBL, Z0, Z1, Z2)
	NEXTROW(1)
	ROW3(STB, STBL, Z4, Z5, Z6)
	NEXTROW(2)
	ROW3(STB, STBL, Z8, Z9, Z10)
	NEXTROW(3)
	ROW3(STB, STBL, Z12, Z13, Z14)
	NEXTROW(4)
	ROW3(STB, STBL, Z16, Z17, Z18)
	NEXTROW(5)
	ROW3(STB, STBL, Z20, Z21, Z22)
	JMP  done

store3_beta0:
	MOVL alpha+72(FP), R12
	CMPL R12, $0x3f800000 // alpha == 1: plain stores
	JEQ  store3_plain
	ROW3(STA, STAL, Z0, Z1, Z2)
	NEXTROW(1)
	ROW3(STA, STAL, Z4, Z5, Z6)
	NEXTROW(2)
	ROW3(STA, STAL, Z8, Z9, Z10)
	NEXTROW(3)
	ROW3(STA, STAL, Z12, Z13, Z14)
	NEXTROW(4)
	ROW3(STA, STAL, Z16, Z17, Z18)
	NEXTROW(5)
	ROW3(STA, STAL, Z20, Z21, Z22)
	JMP  done

store3_plain:
	ROW3(STP, STPL, Z0, Z1, Z2)
	NEXTROW(1)
	ROW3(STP, STPL, Z4, Z5, Z6)
	NEXTROW(2)
	ROW3(STP, STPL, Z8, Z9, Z10)
	NEXTROW(3)
	ROW3(STP, STPL, Z12, Z13, Z14)
	NEXTROW(4)
	ROW3(STP, STPL, Z16, Z17, Z18)
	NEXTROW(5)
	ROW3(STP, STPL, Z20, Z21, Z22)
	JMP  done

store2:
	VBROADCASTSS alpha+72(FP), Z28
	VBROADCASTSS beta+76(FP), Z29
	MOVL beta+76(FP), R12
	ANDL $0x7fffffff, R12 // beta == 0, either sign: do not read C
	JEQ  store2_beta0
	ROW2(STB, STBL, Z0, Z1)
	NEXTROW(1)
	ROW2(STB, STBL, Z4, Z5)
	NEXTROW(2)
	ROW2(STB, STBL, Z8, Z9)
	NEXTROW(3)
	ROW2(STB, STBL, Z12, Z13)
	NEXTROW(4)
	ROW2(STB, STBL, Z16, Z17)
	NEXTROW(5)
	ROW2(STB, STBL, Z20, Z21)
	JMP  done

store2_beta0:
	MOVL alpha+72(FP), R12
	CMPL R12, $0x3f800000 // alpha == 1: plain stores
	JEQ  store2_plain
	ROW2(STA, STAL, Z0, Z1)
	NEXTROW(1)
	ROW2(STA, STAL, Z4, Z5)
	NEXTROW(2)
	ROW2(STA, STAL, Z8, Z9)
	NEXTROW(3)
	ROW2(STA, STAL, Z12, Z13)
	NEXTROW(4)
	ROW2(STA, STAL, Z16, Z17)
	NEXTROW(5)
	ROW2(STA, STAL, Z20, Z21)
	JMP  done

store2_plain:
	ROW2(STP, STPL, Z0, Z1)
	NEXTROW(1)
	ROW2(STP, STPL, Z4, Z5)
	NEXTROW(2)
	ROW2(STP, STPL, Z8, Z9)
	NEXTROW(3)
	ROW2(STP, STPL, Z12, Z13)
	NEXTROW(4)
	ROW2(STP, STPL, Z16, Z17)
	NEXTROW(5)
	ROW2(STP, STPL, Z20, Z21)
	JMP  done

store1:
	VBROADCASTSS alpha+72(FP), Z28
	VBROADCASTSS beta+76(FP), Z29
	MOVL beta+76(FP), R12
	ANDL $0x7fffffff, R12 // beta == 0, either sign: do not read C
	JEQ  store1_beta0
	ROW1(STB, STBL, Z0)
	NEXTROW(1)
	ROW1(STB, STBL, Z4)
	NEXTROW(2)
	ROW1(STB, STBL, Z8)
	NEXTROW(3)
	ROW1(STB, STBL, Z12)
	NEXTROW(4)
	ROW1(STB, STBL, Z16)
	NEXTROW(5)
	ROW1(STB, STBL, Z20)
	JMP  done

store1_beta0:
	MOVL alpha+72(FP), R12
	CMPL R12, $0x3f800000 // alpha == 1: plain stores
	JEQ  store1_plain
	ROW1(STA, STAL, Z0)
	NEXTROW(1)
	ROW1(STA, STAL, Z4)
	NEXTROW(2)
	ROW1(STA, STAL, Z8)
	NEXTROW(3)
	ROW1(STA, STAL, Z12)
	NEXTROW(4)
	ROW1(STA, STAL, Z16)
	NEXTROW(5)
	ROW1(STA, STAL, Z20)
	JMP  done

store1_plain:
	ROW1(STP, STPL, Z0)
	NEXTROW(1)
	ROW1(STP, STPL, Z4)
	NEXTROW(2)
	ROW1(STP, STPL, Z8)
	NEXTROW(3)
	ROW1(STP, STPL, Z12)
	NEXTROW(4)
	ROW1(STP, STPL, Z16)
	NEXTROW(5)
	ROW1(STP, STPL, Z20)
	JMP  done

done:
	VZEROUPPER
	RET

// packRunsAVX512 copies, for each p < nk, the runs of contiguous floats
// data[ks[p]+src : ks[p]+src+len] to dst[p*w+dj : p*w+dj+len], runs being
// nruns triples (dj, src, len) of ints with len <= 64. It takes one run at
// a time down all the p (so the run's mask is set once) and moves it as 1
// to 4 vectors, the last under the mask: an im2col panel (runs of a row's
// output width) packs at vector speed instead of one element at a time.
//
// func packRunsAVX512(dst, data *float32, ks *int, nk, w int, runs *int, nruns int)
TEXT ·packRunsAVX512(SB), NOSPLIT, $0-56
	MOVQ dst+0(FP), DI
	MOVQ data+8(FP), SI
	MOVQ nk+24(FP), R9
	MOVQ w+32(FP), R10
	MOVQ runs+40(FP), R11
	MOVQ nruns+48(FP), R12
	SHLQ $2, R10 // dst row stride in bytes
	TESTQ R9, R9
	JEQ  pdone
	TESTQ R12, R12
	JEQ  pdone

prun:
	MOVQ (R11), DX
	LEAQ (DI)(DX*4), DX // destination of the run at p = 0
	MOVQ 8(R11), CX
	LEAQ (SI)(CX*4), CX // source of the run, less ks[p]
	MOVQ 16(R11), R14   // length
	ADDQ $24, R11
	MOVQ ks+16(FP), R8
	MOVQ R9, R13        // p left
	// K1 masks the last vector: its ((len-1)&15)+1 floats.
	LEAQ -1(R14), AX
	ANDQ $15, AX
	INCQ AX
	MOVL $1, BX
	SHLXL AX, BX, BX
	DECL BX
	KMOVW BX, K1
	CMPQ R14, $16
	JLE  prun1
	CMPQ R14, $32
	JLE  prun2
	CMPQ R14, $48
	JLE  prun3
	JMP  prun4

prun1:
	MOVQ (R8), AX
	ADDQ $8, R8
	LEAQ (CX)(AX*4), AX
	VMOVUPS.Z 0(AX), K1, Z0
	VMOVUPS Z0, K1, 0(DX)
	ADDQ R10, DX
	DECQ R13
	JNE  prun1
	JMP  pnext

prun2:
	MOVQ (R8), AX
	ADDQ $8, R8
	LEAQ (CX)(AX*4), AX
	VMOVUPS 0(AX), Z0
	VMOVUPS.Z 64(AX), K1, Z1
	VMOVUPS Z0, 0(DX)
	VMOVUPS Z1, K1, 64(DX)
	ADDQ R10, DX
	DECQ R13
	JNE  prun2
	JMP  pnext

prun3:
	MOVQ (R8), AX
	ADDQ $8, R8
	LEAQ (CX)(AX*4), AX
	VMOVUPS 0(AX), Z0
	VMOVUPS 64(AX), Z1
	VMOVUPS.Z 128(AX), K1, Z2
	VMOVUPS Z0, 0(DX)
	VMOVUPS Z1, 64(DX)
	VMOVUPS Z2, K1, 128(DX)
	ADDQ R10, DX
	DECQ R13
	JNE  prun3
	JMP  pnext

prun4:
	MOVQ (R8), AX
	ADDQ $8, R8
	LEAQ (CX)(AX*4), AX
	VMOVUPS 0(AX), Z0
	VMOVUPS 64(AX), Z1
	VMOVUPS 128(AX), Z2
	VMOVUPS.Z 192(AX), K1, Z3
	VMOVUPS Z0, 0(DX)
	VMOVUPS Z1, 64(DX)
	VMOVUPS Z2, 128(DX)
	VMOVUPS Z3, K1, 192(DX)
	ADDQ R10, DX
	DECQ R13
	JNE  prun4
	JMP  pnext

pnext:
	DECQ R12
	JNE  prun

pdone:
	VZEROUPPER
	RET

// transposeAVX512 packs the transposes of 16 columns: dst[p*w+i] =
// data[offs[i]+p] for i < 16, p < kc, where each column data[offs[i]:][:kc]
// is contiguous (a transposed dense operand). Blocks of 16x16 are loaded as
// 16 vectors, transposed in registers (unpack by 32 and 64 bits, then two
// rounds of 128-bit lane shuffles) and stored as 16 rows, instead of
// moving 256 floats one by one. The last block loads its short columns
// under a mask and stores only its rows.
//
// LOADCOL loads column offs[off/8] at rows p0.. (DX) under the mask K1.
#define LOADCOL(off, z) MOVQ off(R8), AX; ADDQ DX, AX; VMOVUPS.Z (SI)(AX*4), K1, z

// STOREROW stores row i of the block, if the block has it.
#define STOREROW(i, z) CMPQ R11, $i; JLE tnext; VMOVUPS z, (BX); ADDQ R10, BX

// func transposeAVX512(dst, data *float32, offs *int, kc, w int)
TEXT ·transposeAVX512(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ data+8(FP), SI
	MOVQ offs+16(FP), R8
	MOVQ kc+24(FP), CX
	MOVQ w+32(FP), R10
	SHLQ $2, R10 // dst row stride in bytes
	XORQ DX, DX  // p0

tblock:
	MOVQ CX, R11
	SUBQ DX, R11 // rows left
	JLE  tdone
	MOVL $0xffff, R12
	CMPQ R11, $16
	JGE  tfull
	MOVL $1, R12
	SHLXL R11, R12, R12
	DECL R12

tfull:
	KMOVW R12, K1
	LOADCOL(0, Z0)
	LOADCOL(8, Z1)
	LOADCOL(16, Z2)
	LOADCOL(24, Z3)
	LOADCOL(32, Z4)
	LOADCOL(40, Z5)
	LOADCOL(48, Z6)
	LOADCOL(56, Z7)
	LOADCOL(64, Z8)
	LOADCOL(72, Z9)
	LOADCOL(80, Z10)
	LOADCOL(88, Z11)
	LOADCOL(96, Z12)
	LOADCOL(104, Z13)
	LOADCOL(112, Z14)
	LOADCOL(120, Z15)
	VUNPCKLPS Z1, Z0, Z16
	VUNPCKHPS Z1, Z0, Z17
	VUNPCKLPS Z3, Z2, Z18
	VUNPCKHPS Z3, Z2, Z19
	VUNPCKLPS Z5, Z4, Z20
	VUNPCKHPS Z5, Z4, Z21
	VUNPCKLPS Z7, Z6, Z22
	VUNPCKHPS Z7, Z6, Z23
	VUNPCKLPS Z9, Z8, Z24
	VUNPCKHPS Z9, Z8, Z25
	VUNPCKLPS Z11, Z10, Z26
	VUNPCKHPS Z11, Z10, Z27
	VUNPCKLPS Z13, Z12, Z28
	VUNPCKHPS Z13, Z12, Z29
	VUNPCKLPS Z15, Z14, Z30
	VUNPCKHPS Z15, Z14, Z31
	VUNPCKLPD Z18, Z16, Z0
	VUNPCKHPD Z18, Z16, Z1
	VUNPCKLPD Z19, Z17, Z2
	VUNPCKHPD Z19, Z17, Z3
	VUNPCKLPD Z22, Z20, Z4
	VUNPCKHPD Z22, Z20, Z5
	VUNPCKLPD Z23, Z21, Z6
	VUNPCKHPD Z23, Z21, Z7
	VUNPCKLPD Z26, Z24, Z8
	VUNPCKHPD Z26, Z24, Z9
	VUNPCKLPD Z27, Z25, Z10
	VUNPCKHPD Z27, Z25, Z11
	VUNPCKLPD Z30, Z28, Z12
	VUNPCKHPD Z30, Z28, Z13
	VUNPCKLPD Z31, Z29, Z14
	VUNPCKHPD Z31, Z29, Z15
	VSHUFF32X4 $0x88, Z4, Z0, Z16
	VSHUFF32X4 $0xdd, Z4, Z0, Z17
	VSHUFF32X4 $0x88, Z12, Z8, Z18
	VSHUFF32X4 $0xdd, Z12, Z8, Z19
	VSHUFF32X4 $0x88, Z5, Z1, Z20
	VSHUFF32X4 $0xdd, Z5, Z1, Z21
	VSHUFF32X4 $0x88, Z13, Z9, Z22
	VSHUFF32X4 $0xdd, Z13, Z9, Z23
	VSHUFF32X4 $0x88, Z6, Z2, Z24
	VSHUFF32X4 $0xdd, Z6, Z2, Z25
	VSHUFF32X4 $0x88, Z14, Z10, Z26
	VSHUFF32X4 $0xdd, Z14, Z10, Z27
	VSHUFF32X4 $0x88, Z7, Z3, Z28
	VSHUFF32X4 $0xdd, Z7, Z3, Z29
	VSHUFF32X4 $0x88, Z15, Z11, Z30
	VSHUFF32X4 $0xdd, Z15, Z11, Z31
	VSHUFF32X4 $0x88, Z18, Z16, Z0
	VSHUFF32X4 $0xdd, Z18, Z16, Z8
	VSHUFF32X4 $0x88, Z19, Z17, Z4
	VSHUFF32X4 $0xdd, Z19, Z17, Z12
	VSHUFF32X4 $0x88, Z22, Z20, Z1
	VSHUFF32X4 $0xdd, Z22, Z20, Z9
	VSHUFF32X4 $0x88, Z23, Z21, Z5
	VSHUFF32X4 $0xdd, Z23, Z21, Z13
	VSHUFF32X4 $0x88, Z26, Z24, Z2
	VSHUFF32X4 $0xdd, Z26, Z24, Z10
	VSHUFF32X4 $0x88, Z27, Z25, Z6
	VSHUFF32X4 $0xdd, Z27, Z25, Z14
	VSHUFF32X4 $0x88, Z30, Z28, Z3
	VSHUFF32X4 $0xdd, Z30, Z28, Z11
	VSHUFF32X4 $0x88, Z31, Z29, Z7
	VSHUFF32X4 $0xdd, Z31, Z29, Z15
	MOVQ DI, BX
	VMOVUPS Z0, (BX)
	ADDQ R10, BX
	STOREROW(1, Z1)
	STOREROW(2, Z2)
	STOREROW(3, Z3)
	STOREROW(4, Z4)
	STOREROW(5, Z5)
	STOREROW(6, Z6)
	STOREROW(7, Z7)
	STOREROW(8, Z8)
	STOREROW(9, Z9)
	STOREROW(10, Z10)
	STOREROW(11, Z11)
	STOREROW(12, Z12)
	STOREROW(13, Z13)
	STOREROW(14, Z14)
	STOREROW(15, Z15)

tnext:
	ADDQ $16, DX
	MOVQ R10, AX
	SHLQ $4, AX
	ADDQ AX, DI
	JMP  tblock

tdone:
	VZEROUPPER
	RET

// findRunsAVX512 splits js[:nj] (1 <= nj <= 64) into runs of contiguous
// offsets, writing triples (dj, js[dj], len) to runs, and returns their
// number and the least and greatest offset. It compares 8 offsets with
// their successors at a time and walks the resulting bit mask of run ends,
// which costs far less than a scalar scan when k is small and a panel's
// split is redone for few rows of copying.
//
// func findRunsAVX512(js *int, nj int, runs *int) (nr, lo, hi int)
TEXT ·findRunsAVX512(SB), NOSPLIT, $0-48
	MOVQ js+0(FP), SI
	MOVQ nj+8(FP), CX
	MOVQ runs+16(FP), DI
	VPBROADCASTQ (SI), Z4 // least so far
	VMOVDQA64 Z4, Z5      // greatest so far
	MOVQ $1, AX
	VPBROADCASTQ AX, Z3
	XORQ R8, R8           // run-end mask
	XORQ DX, DX           // j
	MOVQ $0xff, R11

rloop:
	MOVQ CX, R9
	SUBQ DX, R9           // nj - j >= 1
	BZHIQ R9, R11, R10    // lanes with j+l < nj
	KMOVB R10, K2
	DECQ R9
	BZHIQ R9, R11, R10    // lanes with j+l+1 < nj
	KMOVB R10, K3
	VMOVDQU64.Z (SI)(DX*8), K2, Z0
	VMOVDQU64.Z 8(SI)(DX*8), K3, Z1
	VPMINSQ Z0, Z4, K2, Z4
	VPMAXSQ Z0, Z5, K2, Z5
	VPADDQ Z3, Z0, Z0
	VPCMPQ $4, Z1, Z0, K3, K1 // js[j+l]+1 != js[j+l+1]
	KMOVB K1, R10
	SHLXQ DX, R10, R10
	ORQ  R10, R8
	ADDQ $8, DX
	CMPQ DX, CX
	JLT  rloop

	// The last offset ends the last run.
	LEAQ -1(CX), R9
	BTSQ R9, R8

	// Reduce the least and greatest over the 8 lanes.
	VSHUFI64X2 $0x4e, Z4, Z4, Z6
	VPMINSQ Z6, Z4, Z4
	VSHUFI64X2 $0xb1, Z4, Z4, Z6
	VPMINSQ Z6, Z4, Z4
	VPSHUFD $0x4e, Z4, Z6
	VPMINSQ Z6, Z4, Z4
	VMOVQ X4, R9
	MOVQ R9, lo+32(FP)
	VSHUFI64X2 $0x4e, Z5, Z5, Z6
	VPMAXSQ Z6, Z5, Z5
	VSHUFI64X2 $0xb1, Z5, Z5, Z6
	VPMAXSQ Z6, Z5, Z5
	VPSHUFD $0x4e, Z5, Z6
	VPMAXSQ Z6, Z5, Z5
	VMOVQ X5, R9
	MOVQ R9, hi+40(FP)

	// Each set bit e of the mask ends a run that started after the
	// previous one.
	XORQ AX, AX // runs
	XORQ BX, BX // start of this run

rend:
	TZCNTQ R8, R9
	MOVQ BX, (DI)
	MOVQ (SI)(BX*8), R10
	MOVQ R10, 8(DI)
	LEAQ 1(R9), R10
	SUBQ BX, R10
	MOVQ R10, 16(DI)
	ADDQ $24, DI
	INCQ AX
	LEAQ 1(R9), BX
	BLSRQ R8, R8
	JNE  rend

	MOVQ AX, nr+24(FP)
	VZEROUPPER
	RET

// dotTileAVX512 accumulates a 6x4 tile of dot products over runs of
// contiguous k: for each run (a0, b0, len) (nruns triples of ints), row i of
// A is a[a0+i*sa+t] and column j of B is b[b0+bo[j]+t], t < len. Lanes are
// kept apart: acc (24 vectors of 16 floats, row-major over the tile) gets
// each lane's own sum, and the caller adds the lanes up. Tails are loaded
// under a mask as zeros.
//
// DOTROW multiplies row r (at base(idx)) into the accumulators z0..z0+3.
#define DOTROW(addr, za, z0, z1, z2, z3) VMOVUPS.Z addr, K1, za; VFMADD231PS Z24, za, z0; VFMADD231PS Z25, za, z1; VFMADD231PS Z26, za, z2; VFMADD231PS Z27, za, z3

// func dotTileAVX512(a, b *float32, sa int, bo *int, runs *int, nruns int, acc *float32)
TEXT ·dotTileAVX512(SB), NOSPLIT, $0-56
	MOVQ sa+16(FP), R8
	SHLQ $2, R8           // row stride in bytes
	LEAQ (R8)(R8*2), R9   // 3 rows
	MOVQ bo+24(FP), AX
	MOVQ 0(AX), R10
	MOVQ 8(AX), R12
	MOVQ 16(AX), R13
	MOVQ 24(AX), R14
	MOVQ runs+32(FP), R11
	MOVQ nruns+40(FP), BX
	VXORPS Z0, Z0, Z0
	VMOVAPS Z0, Z1
	VMOVAPS Z0, Z2
	VMOVAPS Z0, Z3
	VMOVAPS Z0, Z4
	VMOVAPS Z0, Z5
	VMOVAPS Z0, Z6
	VMOVAPS Z0, Z7
	VMOVAPS Z0, Z8
	VMOVAPS Z0, Z9
	VMOVAPS Z0, Z10
	VMOVAPS Z0, Z11
	VMOVAPS Z0, Z12
	VMOVAPS Z0, Z13
	VMOVAPS Z0, Z14
	VMOVAPS Z0, Z15
	VMOVAPS Z0, Z16
	VMOVAPS Z0, Z17
	VMOVAPS Z0, Z18
	VMOVAPS Z0, Z19
	VMOVAPS Z0, Z20
	VMOVAPS Z0, Z21
	VMOVAPS Z0, Z22
	VMOVAPS Z0, Z23
	TESTQ BX, BX
	JEQ  dstore

drun:
	MOVQ a+0(FP), SI
	MOVQ 0(R11), AX
	LEAQ (SI)(AX*4), SI  // row 0 of A at this run
	LEAQ (SI)(R9*1), DX  // row 3
	MOVQ b+8(FP), DI
	MOVQ 8(R11), AX
	LEAQ (DI)(AX*4), DI  // B at this run, less the column offsets
	MOVQ 16(R11), CX     // length
	ADDQ $24, R11

dchunk:
	MOVL $0xffff, AX
	CMPQ CX, $16
	JGE  dmask
	MOVL $1, AX
	SHLXL CX, AX, AX
	DECL AX

dmask:
	KMOVW AX, K1
	VMOVUPS.Z (DI)(R10*4), K1, Z24
	VMOVUPS.Z (DI)(R12*4), K1, Z25
	VMOVUPS.Z (DI)(R13*4), K1, Z26
	VMOVUPS.Z (DI)(R14*4), K1, Z27
	DOTROW((SI), Z28, Z0, Z1, Z2, Z3)
	DOTROW((SI)(R8*1), Z29, Z4, Z5, Z6, Z7)
	DOTROW((SI)(R8*2), Z30, Z8, Z9, Z10, Z11)
	DOTROW((DX), Z31, Z12, Z13, Z14, Z15)
	DOTROW((DX)(R8*1), Z28, Z16, Z17, Z18, Z19)
	DOTROW((DX)(R8*2), Z29, Z20, Z21, Z22, Z23)
	ADDQ $64, SI
	ADDQ $64, DX
	ADDQ $64, DI
	SUBQ $16, CX
	JG   dchunk
	DECQ BX
	JNE  drun

dstore:
	MOVQ acc+48(FP), AX
	VMOVUPS Z0, 0(AX)
	VMOVUPS Z1, 64(AX)
	VMOVUPS Z2, 128(AX)
	VMOVUPS Z3, 192(AX)
	VMOVUPS Z4, 256(AX)
	VMOVUPS Z5, 320(AX)
	VMOVUPS Z6, 384(AX)
	VMOVUPS Z7, 448(AX)
	VMOVUPS Z8, 512(AX)
	VMOVUPS Z9, 576(AX)
	VMOVUPS Z10, 640(AX)
	VMOVUPS Z11, 704(AX)
	VMOVUPS Z12, 768(AX)
	VMOVUPS Z13, 832(AX)
	VMOVUPS Z14, 896(AX)
	VMOVUPS Z15, 960(AX)
	VMOVUPS Z16, 1024(AX)
	VMOVUPS Z17, 1088(AX)
	VMOVUPS Z18, 1152(AX)
	VMOVUPS Z19, 1216(AX)
	VMOVUPS Z20, 1280(AX)
	VMOVUPS Z21, 1344(AX)
	VMOVUPS Z22, 1408(AX)
	VMOVUPS Z23, 1472(AX)
	VZEROUPPER
	RET

// dotPairsAVX512 is dotTileAVX512 over pairs of 8-float blocks instead of
// runs: each of the npairs quadruples (alo, blo, ahi, bhi) fills a vector's
// low half from the blocks at alo (A, row stride sa) and blo (B, plus the
// column offsets bo) and its high half from those at ahi and bhi, so that
// runs of 8, 16 or 24 use every lane. single, if not 0, adds one last
// block (a, b) in the low half only.
//
// PAIRROW multiplies row r into z0..z3 and steps AX, CX to the next row.
#define PAIRROW(za, z0, z1, z2, z3) VMOVUPS (AX), Y28; VINSERTF32X8 $1, (CX), za, za; VFMADD231PS Z24, za, z0; VFMADD231PS Z25, za, z1; VFMADD231PS Z26, za, z2; VFMADD231PS Z27, za, z3; ADDQ R8, AX; ADDQ R8, CX

// func dotPairsAVX512(a, b *float32, sa int, bo *int, pairs *int, npairs int, acc *float32, single *int)
TEXT ·dotPairsAVX512(SB), NOSPLIT, $0-64
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ sa+16(FP), R8
	SHLQ $2, R8 // row stride in bytes
	MOVQ bo+24(FP), AX
	MOVQ 0(AX), R10
	MOVQ 8(AX), R12
	MOVQ 16(AX), R13
	MOVQ 24(AX), R14
	MOVQ pairs+32(FP), R11
	MOVQ npairs+40(FP), R9
	VXORPS Z0, Z0, Z0
	VMOVAPS Z0, Z1
	VMOVAPS Z0, Z2
	VMOVAPS Z0, Z3
	VMOVAPS Z0, Z4
	VMOVAPS Z0, Z5
	VMOVAPS Z0, Z6
	VMOVAPS Z0, Z7
	VMOVAPS Z0, Z8
	VMOVAPS Z0, Z9
	VMOVAPS Z0, Z10
	VMOVAPS Z0, Z11
	VMOVAPS Z0, Z12
	VMOVAPS Z0, Z13
	VMOVAPS Z0, Z14
	VMOVAPS Z0, Z15
	VMOVAPS Z0, Z16
	VMOVAPS Z0, Z17
	VMOVAPS Z0, Z18
	VMOVAPS Z0, Z19
	VMOVAPS Z0, Z20
	VMOVAPS Z0, Z21
	VMOVAPS Z0, Z22
	VMOVAPS Z0, Z23
	TESTQ R9, R9
	JEQ  psingle

ppair:
	MOVQ 0(R11), AX
	LEAQ (SI)(AX*4), AX
	MOVQ 8(R11), BX
	LEAQ (DI)(BX*4), BX
	MOVQ 16(R11), CX
	LEAQ (SI)(CX*4), CX
	MOVQ 24(R11), DX
	LEAQ (DI)(DX*4), DX
	ADDQ $32, R11
	VMOVUPS (BX)(R10*4), Y24
	VINSERTF32X8 $1, (DX)(R10*4), Z24, Z24
	VMOVUPS (BX)(R12*4), Y25
	VINSERTF32X8 $1, (DX)(R12*4), Z25, Z25
	VMOVUPS (BX)(R13*4), Y26
	VINSERTF32X8 $1, (DX)(R13*4), Z26, Z26
	VMOVUPS (BX)(R14*4), Y27
	VINSERTF32X8 $1, (DX)(R14*4), Z27, Z27
	PAIRROW(Z28, Z0, Z1, Z2, Z3)
	PAIRROW(Z28, Z4, Z5, Z6, Z7)
	PAIRROW(Z28, Z8, Z9, Z10, Z11)
	PAIRROW(Z28, Z12, Z13, Z14, Z15)
	PAIRROW(Z28, Z16, Z17, Z18, Z19)
	PAIRROW(Z28, Z20, Z21, Z22, Z23)
	DECQ R9
	JNE  ppair

psingle:
	MOVQ single+56(FP), R11
	MOVQ 0(R11), AX
	TESTQ AX, AX
	JEQ  pstore
	MOVQ 8(R11), AX
	LEAQ (SI)(AX*4), AX
	MOVQ 16(R11), BX
	LEAQ (DI)(BX*4), BX
	// VEX loads of 8 floats zero the upper half.
	VMOVUPS (BX)(R10*4), Y24
	VMOVUPS (BX)(R12*4), Y25
	VMOVUPS (BX)(R13*4), Y26
	VMOVUPS (BX)(R14*4), Y27
	VMOVUPS (AX), Y28
	VFMADD231PS Z24, Z28, Z0
	VFMADD231PS Z25, Z28, Z1
	VFMADD231PS Z26, Z28, Z2
	VFMADD231PS Z27, Z28, Z3
	ADDQ R8, AX
	VMOVUPS (AX), Y28
	VFMADD231PS Z24, Z28, Z4
	VFMADD231PS Z25, Z28, Z5
	VFMADD231PS Z26, Z28, Z6
	VFMADD231PS Z27, Z28, Z7
	ADDQ R8, AX
	VMOVUPS (AX), Y28
	VFMADD231PS Z24, Z28, Z8
	VFMADD231PS Z25, Z28, Z9
	VFMADD231PS Z26, Z28, Z10
	VFMADD231PS Z27, Z28, Z11
	ADDQ R8, AX
	VMOVUPS (AX), Y28
	VFMADD231PS Z24, Z28, Z12
	VFMADD231PS Z25, Z28, Z13
	VFMADD231PS Z26, Z28, Z14
	VFMADD231PS Z27, Z28, Z15
	ADDQ R8, AX
	VMOVUPS (AX), Y28
	VFMADD231PS Z24, Z28, Z16
	VFMADD231PS Z25, Z28, Z17
	VFMADD231PS Z26, Z28, Z18
	VFMADD231PS Z27, Z28, Z19
	ADDQ R8, AX
	VMOVUPS (AX), Y28
	VFMADD231PS Z24, Z28, Z20
	VFMADD231PS Z25, Z28, Z21
	VFMADD231PS Z26, Z28, Z22
	VFMADD231PS Z27, Z28, Z23

pstore:
	MOVQ acc+48(FP), AX
	VMOVUPS Z0, 0(AX)
	VMOVUPS Z1, 64(AX)
	VMOVUPS Z2, 128(AX)
	VMOVUPS Z3, 192(AX)
	VMOVUPS Z4, 256(AX)
	VMOVUPS Z5, 320(AX)
	VMOVUPS Z6, 384(AX)
	VMOVUPS Z7, 448(AX)
	VMOVUPS Z8, 512(AX)
	VMOVUPS Z9, 576(AX)
	VMOVUPS Z10, 640(AX)
	VMOVUPS Z11, 704(AX)
	VMOVUPS Z12, 768(AX)
	VMOVUPS Z13, 832(AX)
	VMOVUPS Z14, 896(AX)
	VMOVUPS Z15, 960(AX)
	VMOVUPS Z16, 1024(AX)
	VMOVUPS Z17, 1088(AX)
	VMOVUPS Z18, 1152(AX)
	VMOVUPS Z19, 1216(AX)
	VMOVUPS Z20, 1280(AX)
	VMOVUPS Z21, 1344(AX)
	VMOVUPS Z22, 1408(AX)
	VMOVUPS Z23, 1472(AX)
	VZEROUPPER
	RET

// convPairsAVX512 computes a 6x64 tile of C = A*B with B read in place:
// A(i, p) = a[i*sa+p], B(p, col) = in[offs[p]+col], for k steps p. The
// tile's 64 columns are 8 blocks of 8 contiguous ones: vector v's low half
// is the block at B column offset bo[2v] (C column co[2v]), its high half
// the one at bo[2v+1] (C column co[2v+1]). Every element is one FMA chain
// over p in order from 0, stored as is: the bits of Mul with alpha 1, beta 0
// and k in one block.
//
// func convPairsAVX512(a *float32, sa int, in *float32, offs *int, k int, bo *int, c *float32, ldc int, co *int)
TEXT ·convPairsAVX512(SB), NOSPLIT, $0-72
	MOVQ a+0(FP), DX
	MOVQ sa+8(FP), R8
	SHLQ $2, R8
	LEAQ (R8)(R8*2), R9  // 3 rows
	LEAQ (R8)(R8*4), R10 // 5 rows
	MOVQ in+16(FP), SI
	MOVQ offs+24(FP), CX
	MOVQ k+32(FP), BX
	MOVQ bo+40(FP), R11
	VXORPS Z0, Z0, Z0
	VMOVAPS Z0, Z1
	VMOVAPS Z0, Z2
	VMOVAPS Z0, Z3
	VMOVAPS Z0, Z4
	VMOVAPS Z0, Z5
	VMOVAPS Z0, Z6
	VMOVAPS Z0, Z7
	VMOVAPS Z0, Z8
	VMOVAPS Z0, Z9
	VMOVAPS Z0, Z10
	VMOVAPS Z0, Z11
	VMOVAPS Z0, Z12
	VMOVAPS Z0, Z13
	VMOVAPS Z0, Z14
	VMOVAPS Z0, Z15
	VMOVAPS Z0, Z16
	VMOVAPS Z0, Z17
	VMOVAPS Z0, Z18
	VMOVAPS Z0, Z19
	VMOVAPS Z0, Z20
	VMOVAPS Z0, Z21
	VMOVAPS Z0, Z22
	VMOVAPS Z0, Z23

cstep:
	MOVQ (CX), AX
	LEAQ (SI)(AX*4), AX
	ADDQ $8, CX
	MOVQ 0(R11), R12
	MOVQ 8(R11), R13
	VMOVUPS (AX)(R12*4), Y24
	VINSERTF32X8 $1, (AX)(R13*4), Z24, Z24
	MOVQ 16(R11), R12
	MOVQ 24(R11), R13
	VMOVUPS (AX)(R12*4), Y25
	VINSERTF32X8 $1, (AX)(R13*4), Z25, Z25
	MOVQ 32(R11), R12
	MOVQ 40(R11), R13
	VMOVUPS (AX)(R12*4), Y26
	VINSERTF32X8 $1, (AX)(R13*4), Z26, Z26
	MOVQ 48(R11), R12
	MOVQ 56(R11), R13
	VMOVUPS (AX)(R12*4), Y27
	VINSERTF32X8 $1, (AX)(R13*4), Z27, Z27
	VBROADCASTSS (DX), Z28
	VFMADD231PS Z24, Z28, Z0
	VFMADD231PS Z25, Z28, Z1
	VFMADD231PS Z26, Z28, Z2
	VFMADD231PS Z27, Z28, Z3
	VBROADCASTSS (DX)(R8*1), Z28
	VFMADD231PS Z24, Z28, Z4
	VFMADD231PS Z25, Z28, Z5
	VFMADD231PS Z26, Z28, Z6
	VFMADD231PS Z27, Z28, Z7
	VBROADCASTSS (DX)(R8*2), Z28
	VFMADD231PS Z24, Z28, Z8
	VFMADD231PS Z25, Z28, Z9
	VFMADD231PS Z26, Z28, Z10
	VFMADD231PS Z27, Z28, Z11
	VBROADCASTSS (DX)(R9*1), Z28
	VFMADD231PS Z24, Z28, Z12
	VFMADD231PS Z25, Z28, Z13
	VFMADD231PS Z26, Z28, Z14
	VFMADD231PS Z27, Z28, Z15
	VBROADCASTSS (DX)(R8*4), Z28
	VFMADD231PS Z24, Z28, Z16
	VFMADD231PS Z25, Z28, Z17
	VFMADD231PS Z26, Z28, Z18
	VFMADD231PS Z27, Z28, Z19
	VBROADCASTSS (DX)(R10*1), Z28
	VFMADD231PS Z24, Z28, Z20
	VFMADD231PS Z25, Z28, Z21
	VFMADD231PS Z26, Z28, Z22
	VFMADD231PS Z27, Z28, Z23
	ADDQ $4, DX
	DECQ BX
	JNE  cstep

	MOVQ c+48(FP), AX
	MOVQ ldc+56(FP), R8
	SHLQ $2, R8
	MOVQ co+64(FP), R11
	MOVQ 0(R11), R12
	MOVQ 8(R11), R13
	VMOVUPS Y0, (AX)(R12*4)
	VEXTRACTF32X8 $1, Z0, (AX)(R13*4)
	MOVQ 16(R11), R12
	MOVQ 24(R11), R13
	VMOVUPS Y1, (AX)(R12*4)
	VEXTRACTF32X8 $1, Z1, (AX)(R13*4)
	MOVQ 32(R11), R12
	MOVQ 40(R11), R13
	VMOVUPS Y2, (AX)(R12*4)
	VEXTRACTF32X8 $1, Z2, (AX)(R13*4)
	MOVQ 48(R11), R12
	MOVQ 56(R11), R13
	VMOVUPS Y3, (AX)(R12*4)
	VEXTRACTF32X8 $1, Z3, (AX)(R13*4)
	ADDQ R8, AX
	MOVQ 0(R11), R12
	MOVQ 8(R11), R13
	VMOVUPS Y4, (AX)(R12*4)
	VEXTRACTF32X8 $1, Z4, (AX)(R13*4)
	MOVQ 16(R11), R12
	MOVQ 24(R11), R13
	VMOVUPS Y5, (AX)(R12*4)
	VEXTRACTF32X8 $1, Z5, (AX)(R13*4)
	MOVQ 32(R11), R12
	MOVQ 40(R11), R13
	VMOVUPS Y6, (AX)(R12*4)
	VEXTRACTF32X8 $1, Z6, (AX)(R13*4)
	MOVQ 48(R11), R12
	MOVQ 56(R11), R13
	VMOVUPS Y7, (AX)(R12*4)
	VEXTRACTF32X8 $1, Z7, (AX)(R13*4)
	ADDQ R8, AX
	MOVQ 0(R11), R12
	MOVQ 8(R11), R13
	VMOVUPS Y8, (AX)(R12*4)
	VEXTRACTF32X8 $1, Z8, (AX)(R13*4)
	MOVQ 16(R11), R12
	MOVQ 24(R11), R13
	VMOVUPS Y9, (AX)(R12*4)
	VEXTRACTF32X8 $1, Z9, (AX)(R13*4)
	MOVQ 32(R11), R12
	MOVQ 40(R11), R13
	VMOVUPS Y10, (AX)(R12*4)
	VEXTRACTF32X8 $1, Z10, (AX)(R13*4)
	MOVQ 48(R11), R12
	MOVQ 56(R11), R13
	VMOVUPS Y11, (AX)(R12*4)
	VEXTRACTF32X8 $1, Z11, (AX)(R13*4)
	ADDQ R8, AX
	MOVQ 0(R11), R12
	MOVQ 8(R11), R13
	VMOVUPS Y12, (AX)(R12*4)
	VEXTRACTF32X8 $1, Z12, (AX)(R13*4)
	MOVQ 16(R11), R12
	MOVQ 24(R11), R13
	VMOVUPS Y13, (AX)(R12*4)
	VEXTRACTF32X8 $1, Z13, (AX)(R13*4)
	MOVQ 32(R11), R12
	MOVQ 40(R11), R13
	VMOVUPS Y14, (AX)(R12*4)
	VEXTRACTF32X8 $1, Z14, (AX)(R13*4)
	MOVQ 48(R11), R12
	MOVQ 56(R11), R13
	VMOVUPS Y15, (AX)(R12*4)
	VEXTRACTF32X8 $1, Z15, (AX)(R13*4)
	ADDQ R8, AX
	MOVQ 0(R11), R12
	MOVQ 8(R11), R13
	VMOVUPS Y16, (AX)(R12*4)
	VEXTRACTF32X8 $1, Z16, (AX)(R13*4)
	MOVQ 16(R11), R12
	MOVQ 24(R11), R13
	VMOVUPS Y17, (AX)(R12*4)
	VEXTRACTF32X8 $1, Z17, (AX)(R13*4)
	MOVQ 32(R11), R12
	MOVQ 40(R11), R13
	VMOVUPS Y18, (AX)(R12*4)
	VEXTRACTF32X8 $1, Z18, (AX)(R13*4)
	MOVQ 48(R11), R12
	MOVQ 56(R11), R13
	VMOVUPS Y19, (AX)(R12*4)
	VEXTRACTF32X8 $1, Z19, (AX)(R13*4)
	ADDQ R8, AX
	MOVQ 0(R11), R12
	MOVQ 8(R11), R13
	VMOVUPS Y20, (AX)(R12*4)
	VEXTRACTF32X8 $1, Z20, (AX)(R13*4)
	MOVQ 16(R11), R12
	MOVQ 24(R11), R13
	VMOVUPS Y21, (AX)(R12*4)
	VEXTRACTF32X8 $1, Z21, (AX)(R13*4)
	MOVQ 32(R11), R12
	MOVQ 40(R11), R13
	VMOVUPS Y22, (AX)(R12*4)
	VEXTRACTF32X8 $1, Z22, (AX)(R13*4)
	MOVQ 48(R11), R12
	MOVQ 56(R11), R13
	VMOVUPS Y23, (AX)(R12*4)
	VEXTRACTF32X8 $1, Z23, (AX)(R13*4)
	ADDQ R8, AX
	VZEROUPPER
	RET
