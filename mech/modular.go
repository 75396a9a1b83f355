package mech

// Modular is implemented by Integer mechanisms whose fields are summed
// modulo Modulus (modular clipping), not exactly: secure aggregation can
// then work in Z_Modulus itself, whatever the number of clients, instead
// of in the Z_2^k of SumBits. Their DecodeSum takes the per-field sum
// reduced modulo Modulus, or the exact sum, or the sum modulo any multiple
// of Modulus (all give the same residues, so the same mean), and their
// streaming Sum keeps the sums modulo Modulus. Modulus is a power of two
// that divides 2^64.
type Modular interface {
	Modulus() uint64
}
