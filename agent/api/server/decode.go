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
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/agent/request"
)

// decodeBody decodes exactly one JSON object from r into v, refusing
// unknown fields and trailing data. Its errors are *request.InputError (400) or
// *http.MaxBytesError (413).
func decodeBody(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bodyError(err, dec.InputOffset())
	}
	// Only white space may follow.
	if _, err := dec.Token(); err != io.EOF {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return request.Invalid("body", "trailing data after the JSON object at offset %d", dec.InputOffset())
	}
	return nil
}

// bodyError explains a decoding error of a request body.
func bodyError(err error, offset int64) error {
	var mbe *http.MaxBytesError
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &mbe):
		return err
	case errors.Is(err, io.EOF):
		return request.Invalid("body", "empty request body: want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return request.Invalid("body", "truncated JSON at offset %d", offset)
	case errors.As(err, &syn):
		return request.Invalid("body", "invalid JSON at offset %d: %s", syn.Offset, strings.TrimPrefix(syn.Error(), "json: "))
	case errors.As(err, &typ):
		if typ.Field == "" {
			return request.Invalid("body", "want a JSON object, got %s", typ.Value)
		}
		return request.Invalid(typ.Field, "want %s, got %s at offset %d", request.JSONKind(typ.Type.String()), typ.Value, typ.Offset)
	}
	// DisallowUnknownFields has no typed error: `json: unknown field "x"`.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if uq, err := strconv.Unquote(name); err == nil {
			name = uq
		}
		return request.Invalid(fieldName(name), "unknown field %s", request.Quote(name))
	}
	return request.Invalid("body", "%s", strings.TrimPrefix(err.Error(), "json: "))
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
