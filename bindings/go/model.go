package kvtier

import (
	"fmt"
	"runtime/cgo"
	"sync"

	"github.com/kvtier/kvtier/bindings/go/internal/capi"
)

// Model is a loaded checkpoint: immutable and safe for concurrent use. Contexts keep their
// own reference, so a Model may be closed as soon as its contexts are created.
type Model struct {
	mu sync.RWMutex
	h  capi.Struct_SS_kvt_model // nil once closed
}

// LoadModel loads an HF checkpoint directory (config.json, *.safetensors) or a GGUF file.
func LoadModel(dir string) (*Model, error) {
	box := capi.New_kvt_model_box()
	defer capi.Delete_kvt_model_box(box)
	errbuf := make([]byte, 1024)
	if st := capi.Kvt_model_load(dir, box, errbuf, len(errbuf)); st != 0 {
		return nil, newError(st, cString(errbuf))
	}
	return &Model{h: capi.Kvt_model_box_value(box)}, nil
}

// ProgressFunc hears the progress of a long call, stage by stage: how much of the stage is
// done out of total, in the stage's unit. Every stage reports done = 0 first and done =
// total last. Return false to cancel the call, which then fails with StatusCancelled. It is
// called on the goroutine that made the call. Stages of LoadModelWithProgress: "files",
// "tensors", "tokenizer"; of NewContext (Options.Progress): "weights" (bytes), "kv_pools",
// "warmup".
type ProgressFunc func(stage string, done, total int64) bool

// LoadModelWithProgress is LoadModel reporting its progress to progress, which may cancel
// it. A panic in progress cancels the load and is raised again here.
func LoadModelWithProgress(dir string, progress ProgressFunc) (*Model, error) {
	if progress == nil {
		return LoadModel(dir)
	}
	call := &progressCall{fn: progress}
	handle := cgo.NewHandle(call)
	defer handle.Delete()
	h, err := loadModelWithProgress(dir, handle)
	if call.panicked != nil {
		if h != nil {
			capi.Kvt_model_free(h)
		}
		panic(call.panicked)
	}
	if err != nil {
		return nil, err
	}
	return &Model{h: h}, nil
}

// VocabSize is the vocabulary size (0 once closed).
func (m *Model) VocabSize() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.h == nil {
		return 0
	}
	return capi.Kvt_model_vocab_size(m.h)
}

// InfoJSON is a JSON summary: architecture, shapes, weight bytes, KV bytes per token, and
// "generation_defaults": the request defaults in force (from generation_config.json).
func (m *Model) InfoJSON() (string, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.h == nil {
		return "", &Error{StatusState, "model is closed"}
	}
	n := []int32{0}
	if st := capi.Kvt_model_info_json(m.h, nil, 0, n); st != 0 {
		return "", newError(st, "kvt_model_info_json")
	}
	buf := make([]byte, n[0]+1)
	if st := capi.Kvt_model_info_json(m.h, buf, len(buf), n); st != 0 {
		return "", newError(st, "kvt_model_info_json")
	}
	return cString(buf), nil
}

// HasTokenizer reports whether the checkpoint had a tokenizer.json (text in and out works).
func (m *Model) HasTokenizer() bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.h != nil && capi.Kvt_model_has_tokenizer(m.h) != 0
}

// Tokenize encodes UTF-8 text into token ids; addSpecial adds what the tokenizer's
// template adds (e.g. BOS).
func (m *Model) Tokenize(text string, addSpecial bool) ([]int32, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.h == nil {
		return nil, &Error{StatusState, "model is closed"}
	}
	special := 0
	if addSpecial {
		special = 1
	}
	n := []int32{0}
	errbuf := make([]byte, 1024)
	if st := capi.Kvt_model_tokenize(m.h, text, special, nil, 0, n, errbuf, len(errbuf)); st != 0 {
		return nil, newError(st, cString(errbuf))
	}
	ids := make([]int32, n[0])
	if st := capi.Kvt_model_tokenize(m.h, text, special, ids, len(ids), n, errbuf, len(errbuf)); st != 0 {
		return nil, newError(st, cString(errbuf))
	}
	return ids, nil
}

// Detokenize decodes token ids into UTF-8 text.
func (m *Model) Detokenize(ids []int32, skipSpecial bool) (string, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.h == nil {
		return "", &Error{StatusState, "model is closed"}
	}
	skip := 0
	if skipSpecial {
		skip = 1
	}
	n := []int32{0}
	errbuf := make([]byte, 1024)
	if st := capi.Kvt_model_detokenize(m.h, ids, len(ids), skip, nil, 0, n, errbuf, len(errbuf)); st != 0 {
		return "", newError(st, cString(errbuf))
	}
	buf := make([]byte, n[0]+1)
	if st := capi.Kvt_model_detokenize(m.h, ids, len(ids), skip, buf, len(buf), n, errbuf, len(errbuf)); st != 0 {
		return "", newError(st, cString(errbuf))
	}
	return string(buf[:n[0]]), nil
}

// TokenBytes returns the bytes a token adds to decoded text: a piece of UTF-8, or for a
// byte token part of a character the next tokens complete; a special token gives its text.
func (m *Model) TokenBytes(id int32) ([]byte, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.h == nil {
		return nil, &Error{StatusState, "model is closed"}
	}
	n := []int32{0}
	if st := capi.Kvt_model_token_bytes(m.h, int(id), nil, 0, n); st != 0 {
		return nil, newError(st, fmt.Sprintf("token %d", id))
	}
	buf := make([]byte, n[0]+1)
	if st := capi.Kvt_model_token_bytes(m.h, int(id), buf, len(buf), n); st != 0 {
		return nil, newError(st, fmt.Sprintf("token %d", id))
	}
	return buf[:n[0]], nil
}

// Close drops this reference to the model. Calling it again does nothing.
func (m *Model) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.h != nil {
		capi.Kvt_model_free(m.h)
		m.h = nil
	}
	return nil
}
