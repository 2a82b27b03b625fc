// Request bodies read field by field, so that an error names the parameter at fault
// (OpenAI's "param") and a parameter this server does not know is refused, as OpenAI
// refuses one, instead of being silently ignored.

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
)

// maxBodyBytes bounds a request body.
const maxBodyBytes = 8 << 20

// fields is a request body's top-level JSON object.
type fields map[string]json.RawMessage

// readFields reads the body: a JSON object of at most maxBodyBytes.
func readFields(w http.ResponseWriter, r *http.Request) (fields, *apiError) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, &apiError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error",
				Message: fmt.Sprintf("The request body is larger than %d bytes.", maxBodyBytes)}
		}
		return nil, invalid("", "The request body could not be read: %v", err)
	}
	var f fields
	if err := json.Unmarshal(body, &f); err != nil || f == nil {
		return nil, invalid("", "The request body is not a JSON object (%s). Send JSON with Content-Type: application/json.",
			describeJSONError(err, body))
	}
	return f, nil
}

func describeJSONError(err error, body []byte) string {
	var syntax *json.SyntaxError
	switch {
	case len(bytes.TrimSpace(body)) == 0:
		return "the body is empty"
	case errors.As(err, &syntax):
		return fmt.Sprintf("%v at byte %d", err, syntax.Offset)
	case err != nil:
		return err.Error()
	}
	return "it is null"
}

// has reports whether the field is present and not null.
func (f fields) has(name string) bool {
	raw, ok := f[name]
	return ok && !bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// get decodes the field into dst when it is present and not null; a value of the wrong
// type is a 400 naming the field.
func (f fields) get(name string, dst interface{}) *apiError {
	if !f.has(name) {
		return nil
	}
	if err := json.Unmarshal(f[name], dst); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			where := name
			if typeErr.Field != "" {
				where += "." + typeErr.Field
			}
			return invalid(name, "Invalid type for '%s': expected %s, but got %s.", where, jsonTypeName(typeErr.Type.Kind().String()), typeErr.Value)
		}
		return invalid(name, "Invalid value for '%s': %v.", name, err)
	}
	return nil
}

func jsonTypeName(goKind string) string {
	switch goKind {
	case "int", "int32", "int64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	case "bool":
		return "a boolean"
	case "string":
		return "a string"
	case "slice":
		return "an array"
	case "map", "struct":
		return "an object"
	}
	return goKind
}

// refuse checks every field: each must be known (accepted or ignored); the unsupported ones
// are refused saying so, and unknown ones as OpenAI refuses them.
func (f fields) refuse(known map[string]bool, unsupported map[string]string) *apiError {
	names := make([]string, 0, len(f))
	for name := range f {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if why, ok := unsupported[name]; ok && f.has(name) {
			return invalid(name, "'%s' is not supported by this server: %s.", name, why)
		}
		if !known[name] {
			if _, ok := unsupported[name]; !ok {
				return invalid(name, "Unrecognized request argument supplied: %s", name)
			}
		}
	}
	return nil
}
