// The HTTP service: routes, the model list, metrics and health, and the JSON helpers the
// endpoints share. Handlers run on net/http's goroutines; they only add, read and cancel
// sequences, which the binding allows from any goroutine while one goroutine steps.

package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	kvtier "github.com/kvtier/kvtier/bindings/go"
)

type server struct {
	engine        *kvtier.Context
	name          string // the model's id in requests and /v1/models
	created       int64
	vocab         int
	contextTokens int // the model's context: the default max_tokens of chat completions
	fingerprint   string
	tokens        *tokenBytes
	stepFailed    atomic.Value // error: the stepping goroutine stopped on it
}

func newServer(model *kvtier.Model, engine *kvtier.Context, name string) (*server, error) {
	info, err := model.InfoJSON()
	if err != nil {
		return nil, err
	}
	var summary struct {
		MaxPositionEmbeddings int `json:"max_position_embeddings"`
	}
	if err := json.Unmarshal([]byte(info), &summary); err != nil {
		return nil, err
	}
	backend := "unknown"
	if stats, err := engine.StatsJSON(); err == nil {
		var s struct {
			Backend string `json:"backend"`
		}
		if json.Unmarshal([]byte(stats), &s) == nil && s.Backend != "" {
			backend = s.Backend
		}
	}
	return &server{engine: engine, name: name, created: now(), vocab: model.VocabSize(),
		contextTokens: summary.MaxPositionEmbeddings, fingerprint: "kvtier-" + kvtier.Version() + "-" + backend,
		tokens: &tokenBytes{model: model, bytes: map[int32][]byte{}}}, nil
}

func (s *server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", only(http.MethodPost, s.chatCompletions))
	mux.HandleFunc("/v1/completions", only(http.MethodPost, s.completions))
	mux.HandleFunc("/v1/models", only(http.MethodGet, s.models))
	mux.HandleFunc("/v1/models/", only(http.MethodGet, s.modelByID))
	mux.HandleFunc("/metrics", only(http.MethodGet, s.metrics))
	mux.HandleFunc("/health", only(http.MethodGet, s.health))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{Status: http.StatusNotFound, Type: "invalid_request_error",
			Message: "Unknown request URL: " + r.Method + " " + r.URL.Path + "."})
	})
	return mux
}

// only answers other methods with 405.
func only(method string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method {
			w.Header().Set("Allow", method)
			writeError(w, &apiError{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error",
				Message: "Method " + r.Method + " is not allowed for " + r.URL.Path + "; use " + method + "."})
			return
		}
		h(w, r)
	}
}

// checkModel: the request names the model this server serves.
func (s *server) checkModel(f fields) *apiError {
	var name string
	if err := f.get("model", &name); err != nil {
		return err
	}
	if name == "" {
		return invalid("model", "Missing required parameter: 'model'.")
	}
	if name != s.name {
		return modelNotFound(name)
	}
	return nil
}

// responseHeader opens every completion and chunk.
type responseHeader struct {
	ID                string `json:"id"`
	Object            string `json:"object"`
	Created           int64  `json:"created"`
	Model             string `json:"model"`
	SystemFingerprint string `json:"system_fingerprint"`
}

func (s *server) header(object, id string, created int64) responseHeader {
	return responseHeader{ID: id, Object: object, Created: created, Model: s.name, SystemFingerprint: s.fingerprint}
}

type modelEntry struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func (s *server) model() modelEntry {
	return modelEntry{ID: s.name, Object: "model", Created: s.created, OwnedBy: "kvtier"}
}

func (s *server) models(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]interface{}{"object": "list", "data": []modelEntry{s.model()}})
}

func (s *server) modelByID(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.URL.Path, "/v1/models/")
	if id != s.name {
		writeError(w, modelNotFound(id))
		return
	}
	writeJSON(w, http.StatusOK, s.model())
}

// metrics serves the library's statistics in the Prometheus text format.
func (s *server) metrics(w http.ResponseWriter, r *http.Request) {
	text, err := s.engine.MetricsText()
	if err != nil {
		writeError(w, serverError("metrics: %v", err))
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Write([]byte(text))
}

// health is 200 while the context steps, 503 once stepping failed.
func (s *server) health(w http.ResponseWriter, r *http.Request) {
	if err, _ := s.stepFailed.Load().(error); err != nil {
		writeError(w, &apiError{Status: http.StatusServiceUnavailable, Type: "server_error",
			Message: "stepping the model failed: " + err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func writeJSON(w http.ResponseWriter, status int, v interface{}) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.Status, map[string]*apiError{"error": e})
}

func newID(prefix string) string {
	var b [12]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func now() int64 { return time.Now().Unix() }

func itoa(i int) string { return strconv.Itoa(i) }
