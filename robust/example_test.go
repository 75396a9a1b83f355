package robust_test

import (
	"fmt"

	"github.com/fedpq/fedpq/robust"
)

func ExampleParse() {
	rows := [][]float32{{1, 0}, {2, 0}, {3, 1}, {4, 1}, {1000, 1}} // one client per row; the last lies
	out := make([]float64, 2)
	for _, spec := range []string{"mean", "median", "trimmed-mean:0.2", "krum:1", "bulyan:1"} {
		r, err := robust.Parse(spec)
		if err != nil {
			fmt.Println(err)
			continue
		}
		if err := r.Aggregate(rows, out); err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(r, out)
	}
	// Output:
	// mean [202 0.6]
	// median [3 1]
	// trimmed-mean:0.2 [3 0.6666666666666666]
	// krum:1 [2 0]
	// robust: bulyan with f = 1 needs at least 4f+3 = 7 messages, got 5
}
