// Package spec reads the settings fedpq writes as KIND or KIND:ARGS (a
// range rule, an attack, a partition, a dme input): one reading, so that
// every setting cuts its kind, splits its arguments and reads its numbers
// alike. What each kind takes, and the message that says so, stay with
// the setting's own package.
package spec

import (
	"fmt"
	"strconv"
	"strings"
)

// Spec is a setting cut at its first colon.
type Spec struct {
	Kind string
	// Args is what follows the colon, as written; HasArgs tells "k:" from
	// "k", which some settings refuse apart.
	Args    string
	HasArgs bool
}

// Parse cuts s into its kind and arguments. It cannot fail: whether the
// kind is known, and what it takes, is the caller's to say.
func Parse(s string) Spec {
	kind, args, has := strings.Cut(s, ":")
	return Spec{Kind: kind, Args: args, HasArgs: has}
}

// Numbers reads Args as comma-separated numbers, each with or without
// space around it; none where Args is empty. The error names the first
// argument that is not a number, as written, for the caller to prefix.
func (p Spec) Numbers() ([]float64, error) {
	if p.Args == "" {
		return nil, nil
	}
	var nums []float64
	for _, f := range strings.Split(p.Args, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", f)
		}
		nums = append(nums, v)
	}
	return nums, nil
}
