// Errors in OpenAI's shape: {"error": {"message", "type", "param", "code"}} with the HTTP
// status OpenAI gives the same kind of error, so that its clients raise the error class a
// program expects (BadRequestError, NotFoundError, ...).

package main

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	kvtier "github.com/kvtier/kvtier/bindings/go"
)

// apiError is an error a response reports.
type apiError struct {
	Status  int     `json:"-"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *apiError) Error() string { return e.Message }

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// invalid is a 400 for a request parameter (param may be "").
func invalid(param, format string, args ...interface{}) *apiError {
	return &apiError{Status: http.StatusBadRequest, Message: fmt.Sprintf(format, args...),
		Type: "invalid_request_error", Param: optional(param)}
}

func withCode(e *apiError, code string) *apiError {
	e.Code = optional(code)
	return e
}

func modelNotFound(name string) *apiError {
	return withCode(&apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: optional("model"),
		Message: fmt.Sprintf("The model `%s` does not exist: this server serves one model (GET /v1/models).", name)},
		"model_not_found")
}

func serverError(format string, args ...interface{}) *apiError {
	return &apiError{Status: http.StatusInternalServerError, Message: fmt.Sprintf(format, args...), Type: "server_error"}
}

// fromLibrary maps an error of the library (adding a request) to the status OpenAI gives
// the same case. param names the request field most likely at fault.
func fromLibrary(err error, param string) *apiError {
	var e *kvtier.Error
	if !errors.As(err, &e) {
		return serverError("%v", err)
	}
	switch e.Status {
	case kvtier.StatusInvalidArgument, kvtier.StatusUnsupported, kvtier.StatusNotFound:
		a := invalid(param, "%s", e.Message)
		if strings.Contains(e.Message, "positions") || strings.Contains(e.Message, "context") {
			a.Code = optional("context_length_exceeded")
		}
		return a
	case kvtier.StatusCapacity:
		// The prompt and max_tokens can never fit in the server's KV memory.
		return withCode(invalid("max_tokens", "%s", e.Message), "context_length_exceeded")
	case kvtier.StatusBusy:
		return &apiError{Status: http.StatusServiceUnavailable, Type: "server_error",
			Message: "The engine is currently overloaded (its waiting queue is full), please try again later: " + e.Message}
	}
	return serverError("%s", e.Error())
}
