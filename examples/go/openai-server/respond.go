// Answering a request from its choices' events, for both endpoints: whole (collected, then
// shaped by the endpoint) or streamed (each event shaped into a chunk as it comes). The
// endpoints differ only in the shapes; counting tokens, failures, the usage chunk, the end of
// the stream and a client that goes away are handled here.

package main

import (
	"context"
	"net/http"
	"strings"

	kvtier "github.com/kvtier/kvtier/bindings/go"
)

// loggedToken is a token whose log-probabilities a choice reports, and where its text starts.
type loggedToken struct {
	*kvtier.TokenLogprobs
	offset int
}

// choiceResult is a choice collected whole.
type choiceResult struct {
	text     strings.Builder
	finish   kvtier.FinishReason
	logprobs []loggedToken
}

// collect waits for every choice to finish. ok is false when the client went away (nothing
// to answer) or a choice failed (err says why).
func (c *choices) collect(ctx context.Context) (results []choiceResult, generated int, ok bool, err *apiError) {
	results = make([]choiceResult, len(c.seqs))
	ok = c.each(ctx, func(e choiceEvent) bool {
		r := &results[e.index]
		if e.HasToken() {
			generated++
		}
		if reportsLogprob(e.Event) {
			r.logprobs = append(r.logprobs, loggedToken{e.Logprobs, r.text.Len()})
		}
		r.text.WriteString(e.Text)
		if e.Final() {
			if e.Finish == kvtier.FinishError {
				err = c.failure(e.index)
				return false
			}
			r.finish = e.Finish
		}
		return true
	})
	return results, generated, ok, err
}

// chunkShapes make an endpoint's stream chunks.
type chunkShapes struct {
	// piece: the chunk for an event's text and log-probabilities (offset: where its text
	// starts in the choice's), or nil when the event shows nothing.
	piece  func(e choiceEvent, logged *kvtier.TokenLogprobs, offset int) interface{}
	finish func(index int, reason string) interface{} // the chunk that ends choice index
	usage  func(u *usage) interface{}                 // the last chunk, with stream_options.include_usage
}

// streamTo sends every event as it comes, then the usage (when asked) and [DONE]; a failed
// choice ends the stream with an error event.
func (c *choices) streamTo(ctx context.Context, stream *eventStream, includeUsage bool, shapes chunkShapes) {
	offsets := make([]int, len(c.seqs))
	generated := 0
	var failed *apiError
	finished := c.each(ctx, func(e choiceEvent) bool {
		if e.HasToken() {
			generated++
		}
		var logged *kvtier.TokenLogprobs
		if reportsLogprob(e.Event) {
			logged = e.Logprobs
		}
		if chunk := shapes.piece(e, logged, offsets[e.index]); chunk != nil && !stream.send(chunk) {
			return false
		}
		offsets[e.index] += len(e.Text)
		if !e.Final() {
			return true
		}
		if e.Finish == kvtier.FinishError {
			failed = c.failure(e.index)
			return false
		}
		return stream.send(shapes.finish(e.index, finishReason(e.Finish)))
	})
	switch {
	case failed != nil:
		stream.send(map[string]*apiError{"error": failed})
	case finished:
		if includeUsage {
			stream.send(shapes.usage(newUsage(c.promptTokens, generated)))
		}
		stream.done()
	} // else the client went away
}

// answer adds the requests' sequences and answers: streamed as stream sends it, or whole as
// whole shapes the collected choices. Whatever way it ends, the sequences are closed (those
// still running, because the client went away, cancelled).
func (s *server) answer(w http.ResponseWriter, r *http.Request, reqs []kvtier.Request, promptParam string, g *generation,
	stream func(ctx context.Context, es *eventStream, c *choices),
	whole func(results []choiceResult, u *usage) interface{}) {
	c, e := s.startChoices(reqs, promptParam)
	if e != nil {
		writeError(w, e)
		return
	}
	defer c.close()
	if g.stream {
		stream(r.Context(), startEventStream(w), c)
		return
	}
	results, generated, ok, failed := c.collect(r.Context())
	if !ok {
		if failed != nil {
			writeError(w, failed)
		}
		return // the client went away
	}
	writeJSON(w, http.StatusOK, whole(results, newUsage(c.promptTokens, generated)))
}
