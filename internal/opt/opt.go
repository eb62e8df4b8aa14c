// Package opt holds the one rule by which an option left unset takes its
// default.
package opt

import "cmp"

// Default sets *v to def when *v is zero or negative: an option struct's
// numeric field or duration that was not set (or set to nonsense) takes
// its documented default. It is not safe for concurrent use on the same v.
func Default[T cmp.Ordered](v *T, def T) {
	var zero T
	if *v <= zero {
		*v = def
	}
}
