package policy

import (
	"reflect"

	"github.com/google/go-cmp/cmp"
)

// quickDiff is cmp.Diff for the comparisons in loops of thousands of
// cases: reflect.DeepEqual first, which is cheap, and cmp.Diff only when
// it finds a difference, to describe it (or to find none: cmp honours
// Equal methods, DeepEqual does not). A difference cmp.Diff reports is
// always one DeepEqual finds, so nothing is missed.
func quickDiff(want, got any, opts ...cmp.Option) string {
	if reflect.DeepEqual(want, got) {
		return ""
	}
	return cmp.Diff(want, got, opts...)
}
