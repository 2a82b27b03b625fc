// Server-sent events as OpenAI streams them: one `data: <json>` event per chunk, flushed at
// once, and `data: [DONE]` at the end.

package main

import (
	"encoding/json"
	"net/http"
)

type eventStream struct {
	w       http.ResponseWriter
	flusher http.Flusher
	failed  bool // a write failed: the client went away
}

func startEventStream(w http.ResponseWriter) *eventStream {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	return &eventStream{w: w, flusher: flusher}
}

// send writes one event; false once the client is gone.
func (s *eventStream) send(v interface{}) bool {
	data, err := json.Marshal(v)
	if err != nil {
		data, _ = json.Marshal(map[string]*apiError{"error": serverError("encoding a chunk: %v", err)})
	}
	return s.write(data)
}

func (s *eventStream) write(data []byte) bool {
	if s.failed {
		return false
	}
	if _, err := s.w.Write(append(append([]byte("data: "), data...), '\n', '\n')); err != nil {
		s.failed = true
		return false
	}
	if s.flusher != nil {
		s.flusher.Flush()
	}
	return true
}

// done ends the stream.
func (s *eventStream) done() { s.write([]byte("[DONE]")) }
