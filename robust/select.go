package robust

import (
	"math"
	"math/bits"
	"slices"
)

// The coordinate-wise rules select on keys rather than on float32 values:
// key maps a float32 to a uint32 in the same order (-0 just below +0), so
// that a comparison is an integer subtraction whose sign bit can be added
// to a count without a branch. The values of a column come in no
// predictable order, and a branch on each comparison is mispredicted half
// the time.
func key(v float32) uint32 {
	b := math.Float32bits(v)
	return b ^ (uint32(int32(b)>>31) | 1<<31)
}

// value is the float64 of the float32 whose key is k.
func value(k uint32) float64 {
	return float64(math.Float32frombits(k ^ (uint32(int32(^k)>>31) | 1<<31)))
}

// nth reorders s so that s[k] holds the value a sort would put there,
// with s[:k] <= s[k] <= s[k+1:] (C++'s nth_element): an introselect with
// branch-free partitions. Values equal to the pivot are split off in a
// second pass, so that columns of few distinct values (one-bit messages
// have two) finish at once; where the pivots go badly a sort takes over,
// so that no input takes quadratic time.
func nth(s []uint32, k int) {
	depth := 2 * bits.Len(uint(len(s)))
	for len(s) > 16 {
		if depth == 0 {
			slices.Sort(s)
			return
		}
		depth--
		p := medianOf3(s[0], s[len(s)/2], s[len(s)-1])
		lt := partition(s, uint64(p))
		if k < lt {
			s = s[:lt]
			continue
		}
		s, k = s[lt:], k-lt
		eq := partition(s, uint64(p)+1)
		if k < eq {
			return // s[k] == p
		}
		s, k = s[eq:], k-eq
	}
	insertionSort(s)
}

// partition moves the keys of s below p to its front and returns how
// many there are (Lomuto's scheme, the swap made unconditionally and the
// count advanced by the sign of v-p).
func partition(s []uint32, p uint64) int {
	n := 0
	for i, v := range s {
		s[i] = s[n]
		s[n] = v
		n += int((uint64(v) - p) >> 63)
	}
	return n
}

func medianOf3(a, b, c uint32) uint32 {
	return max(min(a, b), min(max(a, b), c))
}

func insertionSort(s []uint32) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
