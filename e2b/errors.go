package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/session"
)

// apiError is the body of a failed control plane or file request, as E2B
// writes it: the HTTP status again as a number, and a message.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// writeJSON writes v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

// writeError writes an error body with status.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, apiError{Code: status, Message: msg})
}

// statusOf maps an error of the Manager, a session or a sandbox to the
// HTTP status the SDKs read, and the message to show.
func statusOf(err error) (int, string) {
	var se *statusError
	switch {
	case errors.As(err, &se):
		return se.status, se.msg
	case errors.Is(err, sandbox.ErrInvalid):
		return http.StatusBadRequest, clean(err, sandbox.ErrInvalid)
	case errors.Is(err, sandbox.ErrNotFound):
		return http.StatusNotFound, clean(err, sandbox.ErrNotFound)
	case errors.Is(err, session.ErrEnded), errors.Is(err, sandbox.ErrDestroyed), errors.Is(err, sandbox.ErrDied):
		// E2B has no "ended": a sandbox that is gone is not found.
		return http.StatusNotFound, err.Error()
	case errors.Is(err, sandbox.ErrExist):
		return http.StatusConflict, clean(err, sandbox.ErrExist)
	case errors.Is(err, sandbox.ErrLimit):
		return http.StatusTooManyRequests, clean(err, sandbox.ErrLimit)
	case errors.Is(err, sandbox.ErrUnsupported):
		return http.StatusNotImplemented, err.Error()
	}
	return http.StatusInternalServerError, "internal error: " + err.Error()
}

// clean drops a sentinel's text from the end of a message.
func clean(err, sentinel error) string {
	return strings.TrimSuffix(err.Error(), ": "+sentinel.Error())
}

// statusError is an error with its status, made by the handlers.
type statusError struct {
	status int
	msg    string
}

func (e *statusError) Error() string { return e.msg }

func httpError(status int, msg string) error { return &statusError{status: status, msg: msg} }

// fail writes err as the SDKs expect it from the control plane and the
// HTTP file routes.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return // the client went away
	}
	status, msg := statusOf(err)
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "5")
	}
	if status == http.StatusInternalServerError {
		h.log.Error("e2b request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeError(w, status, msg)
}

// rpcCodes are the Connect codes of the statuses statusOf gives.
var rpcCodes = map[int]connect.Code{
	http.StatusBadRequest:      connect.CodeInvalidArgument,
	http.StatusUnauthorized:    connect.CodeUnauthenticated,
	http.StatusForbidden:       connect.CodePermissionDenied,
	http.StatusNotFound:        connect.CodeNotFound,
	http.StatusConflict:        connect.CodeAlreadyExists,
	http.StatusTooManyRequests: connect.CodeResourceExhausted,
	http.StatusNotImplemented:  connect.CodeUnimplemented,
}

// rpcError maps an error to a Connect error, for the envd services.
func rpcError(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	}
	status, msg := statusOf(err)
	code, ok := rpcCodes[status]
	if !ok {
		code = connect.CodeInternal
	}
	return connect.NewError(code, errors.New(msg))
}
