// Package docs holds gracewatch's design document and the test
// that keeps every citation of it in the tree pointing at a section that
// exists. It has no code.
package docs
