package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/agent/request"
	"github.com/gracewatch/gracewatch/internal/jsonbody"
)

// decodeBody decodes exactly one JSON object from r into v, refusing
// unknown fields and trailing data (jsonbody.Decode). Its errors are
// *request.InputError (400) or *http.MaxBytesError (413).
func decodeBody(r io.Reader, v any) error {
	var e *jsonbody.Error
	if err := jsonbody.Decode(r, v); !errors.As(err, &e) {
		return err // nil
	}
	return bodyError(e)
}

// bodyError words what is wrong with a request body for the API's error
// body: the field at fault ("body" where it is the whole body) and where.
func bodyError(e *jsonbody.Error) error {
	var mbe *http.MaxBytesError
	switch e.Kind {
	case jsonbody.Read:
		if errors.As(e.Err, &mbe) {
			return mbe
		}
		return request.Invalid("body", "%s", e.Err)
	case jsonbody.Empty:
		return request.Invalid("body", "empty request body: want a JSON object")
	case jsonbody.Truncated:
		return request.Invalid("body", "truncated JSON at offset %d", e.Offset)
	case jsonbody.Syntax:
		return request.Invalid("body", "invalid JSON at offset %d: %s", e.Offset, e.Detail)
	case jsonbody.NotObject:
		return request.Invalid("body", "want a JSON object, got %s", e.Got)
	case jsonbody.WrongType:
		return request.Invalid(e.Field, "want %s, got %s at offset %d", e.Want, e.Got, e.Offset)
	case jsonbody.UnknownField:
		return request.Invalid(fieldName(e.Field), "unknown field %s", request.Quote(e.Field))
	case jsonbody.Trailing:
		return request.Invalid("body", "trailing data after the JSON object at offset %d", e.Offset)
	}
	return request.Invalid("body", "%s", e.Detail)
}

// fieldName returns name for ErrorBody.Field when it is usable there, else
// "body": a client-chosen name may be empty, huge or not UTF-8.
func fieldName(name string) string {
	if name == "" || len(name) > 64 || !utf8.ValidString(name) {
		return "body"
	}
	return name
}

// decodeJobStart decodes and checks a POST /v1/jobs body. The checks need no
// configuration (the Service checks the expiration's age against its
// max_expiration_age).
//
// A user name that request.ValidateUser refuses does not fail the
// registration (request.CheckUser): it is dropped from req and returned as
// warn, for the log and the answer.
func decodeJobStart(r io.Reader, now time.Time) (req request.JobStartRequest, warn, err error) {
	if err := decodeBody(r, &req); err != nil {
		return req, nil, err
	}
	if err := request.CheckRegistration(req.Job, req.Expiration, req.Grace, now); err != nil {
		return req, nil, err
	}
	if err := request.ValidateCgroup(req.Cgroup); err != nil {
		return req, nil, err
	}
	if req.PlanGrace != "" {
		if _, err := request.ParseSchedulerGrace(req.PlanGrace); err != nil {
			return req, nil, err
		}
	}
	req.User, warn = request.CheckUser(req.User)
	return req, warn, nil
}

// warnUser logs a user name dropped from job's registration.
func (s *Server) warnUser(job string, warn error) {
	if warn != nil {
		s.log.Warn("job user name refused, the job is supervised without one", "job", job, "err", warn)
	}
}

// withWarning is job with the warning of a dropped user name, if any.
func withWarning(job api.Job, id string, warn error) api.Job {
	if warn != nil {
		job.Warnings = append(job.Warnings, request.UserWarning(id, warn))
	}
	return job
}

// decodeJobUpdate reads and checks the body of POST /v1/jobs/{id}/update:
// at least one field, each well formed. Whether the new expiration lies
// before now is the Service's check, against its own clock.
//
// A user name that request.ValidateUser refuses is dropped with a warning
// (as in decodeJobStart) when the update changes something else, and
// refused when it is all the update holds.
func decodeJobUpdate(r io.Reader, now time.Time) (req request.JobUpdateRequest, warn, err error) {
	if err := decodeBody(r, &req); err != nil {
		return req, nil, err
	}
	if req.Expiration == "" && req.Cgroup == "" && req.User == "" {
		return req, nil, request.Invalid("expiration", "nothing to update: give an expiration, a cgroup or a user")
	}
	if req.Expiration != "" {
		if _, _, err := request.ParseExpiration(req.Expiration, now, 0); err != nil {
			return req, nil, err
		}
	}
	if err := request.ValidateCgroup(req.Cgroup); err != nil {
		return req, nil, err
	}
	if req.User, warn = request.CheckUser(req.User); warn != nil && req.Expiration == "" && req.Cgroup == "" {
		return req, nil, warn
	}
	return req, warn, nil
}

// Responses.

// errorResponse maps an error of decoding or of the Service to an HTTP
// status and body.
func errorResponse(err error) (int, api.ErrorBody) {
	var ie *request.InputError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &ie):
		return http.StatusBadRequest, api.ErrorBody{Error: ie.Error(), Field: ie.Field}
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, api.ErrorBody{Error: fmt.Sprintf("request body exceeds %d bytes", mbe.Limit)}
	case errors.Is(err, request.ErrUnknownJob):
		return http.StatusNotFound, api.ErrorBody{Error: err.Error()}
	case errors.Is(err, request.ErrDuplicateJob), errors.Is(err, request.ErrConflict):
		return http.StatusConflict, api.ErrorBody{Error: err.Error()}
	case errors.Is(err, request.ErrForbidden):
		return http.StatusForbidden, api.ErrorBody{Error: err.Error()}
	case errors.Is(err, request.ErrFull):
		return http.StatusServiceUnavailable, api.ErrorBody{Error: err.Error()}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, api.ErrorBody{Error: err.Error()}
	}
	return http.StatusInternalServerError, api.ErrorBody{Error: err.Error()}
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, body := errorResponse(err)
	if status >= 500 {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	} else {
		s.log.Debug("request refused", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
	writeJSONError(w, status, body)
}

// reply answers a call of the Service: its error's answer when err is not
// nil, else v as JSON with status.
func (s *Server) reply(w http.ResponseWriter, r *http.Request, status int, v any, err error) {
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, status, v)
}

// pathJobID is the job id of the request's path ({id}), or false when it
// is not a valid one and the error is answered.
func (s *Server) pathJobID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if err := request.ValidateJobID(id); err != nil {
		s.writeError(w, r, err)
		return "", false
	}
	return id, true
}

func writeJSONError(w http.ResponseWriter, status int, body api.ErrorBody) {
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		_ = json.NewEncoder(&buf).Encode(api.ErrorBody{Error: "encode response: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}
