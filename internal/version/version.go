// Package version holds the build's version, set by the linker from
// `git describe` (see the Makefile).
package version

// Version is the release, or "dev" for an unstamped build.
var Version = "dev"
