// POST /v1/completions: text (or token id) prompts continued, n choices per prompt, streamed
// as text_completion events or answered as one text_completion.

package main

import (
	"context"
	"encoding/json"
	"net/http"

	kvtier "github.com/kvtier/kvtier/bindings/go"
)

// OpenAI's default for text completions.
const defaultCompletionTokens = 16

var (
	completionParams      = knownParams("prompt", "logprobs", "echo", "suffix", "best_of")
	completionUnsupported = map[string]string{}
)

type completionChoice struct {
	Text         string              `json:"text"`
	Index        int                 `json:"index"`
	Logprobs     *completionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
}

type completion struct {
	responseHeader
	Choices []completionChoice `json:"choices"`
	Usage   *usage             `json:"usage,omitempty"`
}

// readPrompts reads prompt: a string, an array of strings, an array of token ids, or an
// array of such arrays; one request each.
func readPrompts(f fields, base kvtier.Request) ([]kvtier.Request, *apiError) {
	if !f.has("prompt") {
		return nil, invalid("prompt", "Missing required parameter: 'prompt'.")
	}
	raw := f["prompt"]
	var text string
	var texts []string
	var ids []int32
	var idLists [][]int32
	var reqs []kvtier.Request
	switch {
	case json.Unmarshal(raw, &text) == nil:
		texts = []string{text}
	case json.Unmarshal(raw, &texts) == nil:
	case json.Unmarshal(raw, &ids) == nil:
		idLists = [][]int32{ids}
	case json.Unmarshal(raw, &idLists) == nil:
	default:
		return nil, invalid("prompt", "Invalid type for 'prompt': expected a string, an array of strings, an array of token ids or an array of arrays of token ids.")
	}
	for i, t := range texts {
		if t == "" {
			return nil, invalid("prompt", "Invalid 'prompt[%d]': the prompt is empty.", i)
		}
		req := base
		req.PromptText = t
		reqs = append(reqs, req)
	}
	for i, list := range idLists {
		if len(list) == 0 {
			return nil, invalid("prompt", "Invalid 'prompt[%d]': the prompt is empty.", i)
		}
		req := base
		req.Prompt = list
		reqs = append(reqs, req)
	}
	if len(reqs) == 0 {
		return nil, invalid("prompt", "Invalid 'prompt': empty array.")
	}
	return reqs, nil
}

func (s *server) completions(w http.ResponseWriter, r *http.Request) {
	f, e := readFields(w, r)
	if e == nil {
		e = f.refuse(completionParams, completionUnsupported)
	}
	if e == nil {
		e = s.checkModel(f)
	}
	var g *generation
	if e == nil {
		g, e = s.readShared(f, defaultCompletionTokens)
	}
	var echo bool
	var suffix string
	bestOf := 0
	top := -1 // logprobs: the number of alternatives, or none
	if e == nil {
		e = f.get("echo", &echo)
	}
	if e == nil && echo {
		e = invalid("echo", "'echo' is not supported by this server.")
	}
	if e == nil {
		e = f.get("suffix", &suffix)
	}
	if e == nil && suffix != "" {
		e = invalid("suffix", "'suffix' is not supported by this server (the model does not fill in the middle).")
	}
	if e == nil {
		e = f.get("best_of", &bestOf)
	}
	if e == nil && f.has("best_of") && bestOf != g.req.N {
		e = invalid("best_of", "'best_of' other than 'n' is not supported by this server.")
	}
	if e == nil && f.has("logprobs") {
		if e = f.get("logprobs", &top); e == nil && (top < 0 || top > 20) {
			e = invalid("logprobs", "Invalid 'logprobs': %d. It must be between 0 and 20.", top)
		}
	}
	var reqs []kvtier.Request
	if e == nil {
		g.req.Logprobs, g.req.TopLogprobs = top >= 0, top
		if top < 0 {
			g.req.TopLogprobs = 0
		}
		reqs, e = readPrompts(f, g.req)
	}
	if e != nil {
		writeError(w, e)
		return
	}
	id, created := newID("cmpl-"), now()
	s.answer(w, r, reqs, "prompt", g,
		func(ctx context.Context, stream *eventStream, c *choices) {
			s.streamCompletions(ctx, stream, c, g, id, created, top)
		},
		func(results []choiceResult, u *usage) interface{} {
			out := completion{responseHeader: s.header("text_completion", id, created),
				Choices: make([]completionChoice, len(results)), Usage: u}
			for i := range results {
				reason := finishReason(results[i].finish)
				choice := completionChoice{Index: i, Text: results[i].text.String(), FinishReason: &reason}
				if top >= 0 {
					choice.Logprobs = newCompletionLogprobs()
					for _, t := range results[i].logprobs {
						choice.Logprobs.add(s.tokens, t.TokenLogprobs, top, t.offset)
					}
				}
				out.Choices[i] = choice
			}
			return out
		})
}

// streamCompletions sends a chunk per event with text or log-probabilities, and one with the
// finish reason as each choice ends.
func (s *server) streamCompletions(ctx context.Context, stream *eventStream, c *choices, g *generation, id string,
	created int64, top int) {
	chunk := func(choices ...completionChoice) completion {
		return completion{responseHeader: s.header("text_completion", id, created),
			Choices: choices}
	}
	c.streamTo(ctx, stream, g.includeUsage, chunkShapes{
		piece: func(e choiceEvent, logged *kvtier.TokenLogprobs, offset int) interface{} {
			if e.Text == "" && (logged == nil || top < 0) {
				return nil
			}
			choice := completionChoice{Index: e.index, Text: e.Text}
			if top >= 0 && logged != nil {
				choice.Logprobs = newCompletionLogprobs()
				choice.Logprobs.add(s.tokens, logged, top, offset)
			}
			return chunk(choice)
		},
		finish: func(index int, reason string) interface{} {
			return chunk(completionChoice{Index: index, FinishReason: &reason})
		},
		usage: func(u *usage) interface{} {
			last := chunk()
			last.Choices, last.Usage = []completionChoice{}, u
			return last
		},
	})
}
