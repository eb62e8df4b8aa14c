package httpapi

import "errors"

// Failure is the class of a Service's error, which decides the status the
// server answers a request with. The Service's own errors stay its own:
// what implements Service wraps each in an *Error of its Failure.
type Failure int

// The failures the server tells apart.
const (
	// Internal is any other error (500), or none answered when the
	// client left.
	Internal Failure = iota
	// NotFound: the node or the incident is unknown (404).
	NotFound
	// Conflict: the request cannot be done in the state things are in:
	// the node is unreachable, its agent refused, it is not gone (forget),
	// the incident is closed, this aggregator does not lead (409).
	Conflict
	// Timeout: the node's agent did not answer in time, and may still act
	// on the request (504).
	Timeout
	// Unsent: the request could not be sent to the node's agent (502).
	Unsent
	// Unavailable: the aggregator is not running (503).
	Unavailable
)

// Error is a Service's error Err with its Failure. Its text is Err's.
type Error struct {
	Failure Failure
	Err     error
}

func (e *Error) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// FailureOf is the Failure of the first *Error in err's chain; Internal
// when there is none.
func FailureOf(err error) Failure {
	var e *Error
	if errors.As(err, &e) {
		return e.Failure
	}
	return Internal
}
