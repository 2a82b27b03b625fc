// The sequences of one request: its prompts' completions, added to the context together,
// their events merged into one stream of (choice, event). The stepping goroutine
// (Context.Run) produces the events; closing the choices cancels every sequence still
// running at once, so a client that goes away stops costing compute in the next step.

package main

import (
	"context"
	"strings"
	"sync"

	kvtier "github.com/kvtier/kvtier/bindings/go"
)

// choiceEvent is an event of choice `index` (prompt i's completion j is choice i*n + j).
type choiceEvent struct {
	index int
	kvtier.Event
}

type choices struct {
	seqs         []*kvtier.Sequence
	promptTokens int // the prompts' tokens, each prompt counted once
	events       chan choiceEvent
	done         chan struct{}
	closeOnce    sync.Once
	forwarders   sync.WaitGroup
}

// startChoices adds one request per prompt (each asks for its N completions).
func (s *server) startChoices(reqs []kvtier.Request, promptParam string) (*choices, *apiError) {
	c := &choices{done: make(chan struct{})}
	for _, req := range reqs {
		seqs, err := s.engine.AddCompletions(req)
		if err != nil {
			c.close()
			return nil, fromLibrary(err, paramOf(err, promptParam))
		}
		prompt, err := seqs[0].PromptTokens()
		if err != nil {
			c.seqs = append(c.seqs, seqs...)
			c.close()
			return nil, serverError("reading the prompt: %v", err)
		}
		c.promptTokens += len(prompt)
		c.seqs = append(c.seqs, seqs...)
	}
	c.events = make(chan choiceEvent, len(c.seqs))
	for i, seq := range c.seqs {
		c.forwarders.Add(1)
		go c.forward(i, seq)
	}
	return c, nil
}

// forward moves one sequence's events to the merged stream until its final event, or
// until the choices are closed.
func (c *choices) forward(index int, seq *kvtier.Sequence) {
	defer c.forwarders.Done()
	for e := range seq.Events() {
		select {
		case c.events <- choiceEvent{index, e}:
		case <-c.done:
			return
		}
	}
}

// close cancels the sequences still running and releases them all; the events not yet
// read are dropped.
func (c *choices) close() {
	c.closeOnce.Do(func() {
		close(c.done)
		for _, seq := range c.seqs {
			seq.Close()
		}
	})
}

// paramOf names the request field a library error is about.
func paramOf(err error, promptParam string) string {
	text := err.Error()
	switch {
	case containsAny(text, "JSON schema", "grammar"):
		return "response_format"
	case containsAny(text, "logit bias"):
		return "logit_bias"
	case containsAny(text, "stop string", "stop token"):
		return "stop"
	case containsAny(text, "max_new_tokens", "can never fit"):
		return "max_tokens"
	}
	return promptParam
}

// each calls fn with every event until every choice has finished. It returns false when the
// client went away first (ctx done) or fn returned false; the caller then closes the
// choices, which cancels what still runs.
func (c *choices) each(ctx context.Context, fn func(choiceEvent) bool) bool {
	left := len(c.seqs)
	for left > 0 {
		select {
		case e := <-c.events:
			if e.Final() {
				left--
			}
			if !fn(e) {
				return false
			}
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// failure is the error of a choice that finished with FinishError.
func (c *choices) failure(index int) *apiError {
	message, err := c.seqs[index].ErrorMessage()
	if err != nil || message == "" {
		message = "the sequence failed"
	}
	return serverError("choice %d failed: %s", index, message)
}

// finishReason is OpenAI's name for why a choice ended.
func finishReason(r kvtier.FinishReason) string {
	switch r {
	case kvtier.FinishLength:
		return "length"
	case kvtier.FinishError:
		return "error"
	}
	return "stop" // a stop token or string; a complete structured output; a cancel
}

func containsAny(text string, parts ...string) bool {
	for _, part := range parts {
		if strings.Contains(text, part) {
			return true
		}
	}
	return false
}
