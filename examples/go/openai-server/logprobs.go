// Log-probabilities in OpenAI's shapes: for chat, one entry per token with the token's text,
// its bytes and its alternatives; for text completions, parallel lists of tokens, their
// log-probabilities, alternatives by token text, and text offsets. A token's bytes (part of
// a character for a byte token) come from the model (Model.TokenBytes), cached.

package main

import (
	"math"
	"sync"

	kvtier "github.com/kvtier/kvtier/bindings/go"
)

// tokenBytes caches each token's bytes. Safe for concurrent use.
type tokenBytes struct {
	model *kvtier.Model
	mu    sync.RWMutex
	bytes map[int32][]byte
}

func (t *tokenBytes) get(id int32) []byte {
	t.mu.RLock()
	b, ok := t.bytes[id]
	t.mu.RUnlock()
	if ok {
		return b
	}
	b, err := t.model.TokenBytes(id)
	if err != nil {
		b = nil // an id the tokenizer does not know (padding rows of a larger embedding)
	}
	t.mu.Lock()
	t.bytes[id] = b
	t.mu.Unlock()
	return b
}

// chatTopLogprob is one alternative of a chat token.
type chatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// chatLogprob is one generated token of a chat completion.
type chatLogprob struct {
	chatTopLogprob
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

type chatLogprobs struct {
	Content []chatLogprob `json:"content"`
	Refusal []chatLogprob `json:"refusal"`
}

func byteList(b []byte) []int {
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return out
}

// jsonLogprob is a log-probability JSON can hold: OpenAI's -9999 for an impossible token.
func jsonLogprob(logprob float32) float64 {
	if math.IsInf(float64(logprob), -1) || math.IsNaN(float64(logprob)) {
		return -9999
	}
	return float64(logprob)
}

func (t *tokenBytes) chatEntry(token int32, logprob float32) chatTopLogprob {
	b := t.get(token)
	return chatTopLogprob{Token: string(b), Logprob: jsonLogprob(logprob), Bytes: byteList(b)}
}

// chatLogprob is an event's token with top alternatives at most.
func (t *tokenBytes) chatLogprob(lp *kvtier.TokenLogprobs, top int) chatLogprob {
	entry := chatLogprob{chatTopLogprob: t.chatEntry(lp.Token, lp.Logprob), TopLogprobs: []chatTopLogprob{}}
	for i, alt := range lp.Top {
		if i == top {
			break
		}
		entry.TopLogprobs = append(entry.TopLogprobs, t.chatEntry(alt.Token, alt.Logprob))
	}
	return entry
}

// completionLogprobs is a text completion's logprobs object.
type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

func newCompletionLogprobs() *completionLogprobs {
	return &completionLogprobs{Tokens: []string{}, TokenLogprobs: []float64{}, TopLogprobs: []map[string]float64{},
		TextOffset: []int{}}
}

// add appends an event's token; offset is where its text starts in the choice's text.
func (c *completionLogprobs) add(t *tokenBytes, lp *kvtier.TokenLogprobs, top int, offset int) {
	c.Tokens = append(c.Tokens, string(t.get(lp.Token)))
	c.TokenLogprobs = append(c.TokenLogprobs, jsonLogprob(lp.Logprob))
	alternatives := map[string]float64{}
	for i, alt := range lp.Top {
		if i == top {
			break
		}
		text := string(t.get(alt.Token))
		if _, seen := alternatives[text]; !seen { // two tokens of one text: the likelier
			alternatives[text] = jsonLogprob(alt.Logprob)
		}
	}
	c.TopLogprobs = append(c.TopLogprobs, alternatives)
	c.TextOffset = append(c.TextOffset, offset)
}

// reportsLogprob says whether an event's token belongs in the log-probabilities: every
// token but the end-of-sequence token that ends a choice without text (OpenAI lists the
// content's tokens).
func reportsLogprob(e kvtier.Event) bool {
	if e.Logprobs == nil || !e.HasToken() {
		return false
	}
	return !(e.Final() && e.Text == "" && (e.Finish == kvtier.FinishStop || e.Finish == kvtier.FinishGrammar))
}
