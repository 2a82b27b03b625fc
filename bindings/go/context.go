package kvtier

import (
	"context"
	"runtime/cgo"
	"sync"
	"time"

	"github.com/kvtier/kvtier/bindings/go/internal/capi"
)

// Context is one engine: KV pools, scheduler, sequences. Add, Cancel, the readers and the
// statistics are safe from any goroutine while one goroutine drives Step (or Run); Close
// waits for the calls in progress and ends every open Sequence.
type Context struct {
	life    sync.RWMutex // read: any call using h; write: Close
	h       capi.Struct_SS_kvt_context
	ev      capi.Struct_SS_kvt_events
	stepMu  sync.Mutex
	textBuf []byte // guarded by stepMu
	// open sequences by id. Add registers while holding mu and Step dispatches while
	// holding it, so no event reaches an unknown id.
	mu   sync.Mutex
	open map[int64]*Sequence
	wake chan struct{} // a token when a sequence is added (wakes Run)
}

// NewContext creates a context on a model; opts may be nil (defaults).
func NewContext(m *Model, opts *Options) (*Context, error) {
	o, err := opts.native()
	if err != nil {
		return nil, err
	}
	defer capi.Kvt_options_free(o)
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.h == nil {
		return nil, &Error{StatusState, "model is closed"}
	}
	var call *progressCall
	if opts != nil && opts.Progress != nil {
		call = &progressCall{fn: opts.Progress}
		handle := cgo.NewHandle(call)
		defer handle.Delete()
		if err := setOptionsProgress(o, handle); err != nil {
			return nil, err
		}
	}
	box := capi.New_kvt_context_box()
	defer capi.Delete_kvt_context_box(box)
	errbuf := make([]byte, 1024)
	st := capi.Kvt_context_create(m.h, o, box, errbuf, len(errbuf))
	if call != nil && call.panicked != nil {
		if st == 0 {
			capi.Kvt_context_free(capi.Kvt_context_box_value(box))
		}
		panic(call.panicked)
	}
	if st != 0 {
		return nil, newError(st, cString(errbuf))
	}
	h := capi.Kvt_context_box_value(box)
	ebox := capi.New_kvt_events_box()
	defer capi.Delete_kvt_events_box(ebox)
	if st := capi.Kvt_events_create(ebox); st != 0 {
		capi.Kvt_context_free(h)
		return nil, newError(st, "kvt_events_create")
	}
	return &Context{h: h, ev: capi.Kvt_events_box_value(ebox), open: map[int64]*Sequence{},
		wake: make(chan struct{}, 1)}, nil
}

var errClosed = &Error{StatusState, "context is closed"}

// acquire takes the read lock; false (lock released) when the context is closed.
func (c *Context) acquire() bool {
	c.life.RLock()
	if c.h == nil {
		c.life.RUnlock()
		return false
	}
	return true
}

func (c *Context) fail(st capi.Enum_SS_kvt_status) error {
	if st == 0 {
		return nil
	}
	buf := make([]byte, 1024)
	capi.Kvt_context_errmsg_copy(c.h, buf, len(buf))
	return newError(st, cString(buf))
}

// Add admits a sequence. Its events arrive on seq.Events() as the context is stepped;
// Close the Sequence when done with it. A request with N > 1 is refused: use
// AddCompletions.
func (c *Context) Add(req Request) (*Sequence, error) {
	if req.completions() > 1 {
		return nil, &Error{StatusInvalidArgument, "the request asks for N > 1 completions: use AddCompletions"}
	}
	seqs, err := c.AddCompletions(req)
	if err != nil {
		return nil, err
	}
	return seqs[0], nil
}

// AddCompletions admits the request's N completions (one when N <= 1), which share the
// prompt's KV blocks; completion i draws from Seed + i and equals the request run alone
// with that seed and N = 1. Each is a Sequence of its own (close each).
func (c *Context) AddCompletions(req Request) ([]*Sequence, error) {
	r, err := req.native()
	if err != nil {
		return nil, err
	}
	defer capi.Kvt_request_free(r)
	if !c.acquire() {
		return nil, errClosed
	}
	defer c.life.RUnlock()
	id := []int64{0}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.fail(capi.Kvt_sequence_add(c.h, r, id)); err != nil {
		return nil, err
	}
	seqs := make([]*Sequence, req.completions())
	for i := range seqs {
		s := &Sequence{ctx: c, id: id[0] + int64(i), events: make(chan Event, req.maxEvents()+1)}
		c.open[s.id] = s
		seqs[i] = s
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return seqs, nil
}

// Step runs one scheduler iteration and returns its events (also delivered to the
// Sequences). Only one Step runs at a time.
func (c *Context) Step() ([]Event, error) {
	if !c.acquire() {
		return nil, errClosed
	}
	defer c.life.RUnlock()
	c.stepMu.Lock()
	defer c.stepMu.Unlock()
	if err := c.fail(capi.Kvt_step(c.h, c.ev)); err != nil {
		return nil, err
	}
	n := capi.Kvt_events_count(c.ev)
	out := make([]Event, 0, n)
	seq, tok, reason := []int64{0}, []int32{0}, []int32{0}
	for i := 0; i < n; i++ {
		if st := capi.Kvt_events_get(c.ev, i, seq, tok, reason); st != 0 {
			return nil, newError(st, "kvt_events_get")
		}
		text, err := c.eventText(i)
		if err != nil {
			return nil, err
		}
		out = append(out, Event{SequenceID: seq[0], Token: tok[0], Text: text, Finish: FinishReason(reason[0]),
			Logprobs: c.eventLogprobs(i, tok[0])})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range out {
		if s := c.open[e.SequenceID]; s != nil && s.deliver(e) && s.closeRequested {
			delete(c.open, e.SequenceID)
			capi.Kvt_sequence_release(c.h, e.SequenceID)
		}
	}
	return out, nil
}

// eventLogprobs is event i's log-probabilities, nil when it carries none.
func (c *Context) eventLogprobs(i int, token int32) *TokenLogprobs {
	lp, n := []float32{0}, []int32{0}
	if capi.Kvt_events_logprob(c.ev, i, lp, n) != 0 {
		return nil
	}
	tokens, logprobs := make([]int32, n[0]), make([]float32, n[0])
	if n[0] > 0 {
		capi.Kvt_events_top_logprobs(c.ev, i, tokens, logprobs, len(tokens), n)
	}
	return &TokenLogprobs{Token: token, Logprob: lp[0], Top: topOf(tokens, logprobs)}
}

func topOf(tokens []int32, logprobs []float32) []TokenLogprob {
	top := make([]TokenLogprob, len(tokens))
	for j := range tokens {
		top[j] = TokenLogprob{tokens[j], logprobs[j]}
	}
	return top
}

// Logprobs returns the log-probabilities of the tokens a sequence generated so far, with
// their alternatives (its Request set Logprobs; StatusState otherwise).
func (c *Context) Logprobs(id int64) ([]TokenLogprobs, error) {
	toks, err := c.Tokens(id)
	if err != nil {
		return nil, err
	}
	return c.logprobList(id, toks, capi.Kvt_sequence_logprobs, capi.Kvt_sequence_top_logprobs)
}

// PromptLogprobs returns the log-probabilities of a sequence's prompt tokens from the
// second on (entry j scores token j + 1; Token is NoToken), once computed (its Request set
// PromptLogprobs; StatusState otherwise).
func (c *Context) PromptLogprobs(id int64) ([]TokenLogprobs, error) {
	return c.logprobList(id, nil, capi.Kvt_sequence_prompt_logprobs, capi.Kvt_sequence_prompt_top_logprobs)
}

func (c *Context) logprobList(id int64, toks []int32,
	values func(capi.Struct_SS_kvt_context, int64, []float32, int, []int32) capi.Enum_SS_kvt_status,
	top func(capi.Struct_SS_kvt_context, int64, int, []int32, []float32, int, []int32) capi.Enum_SS_kvt_status,
) ([]TokenLogprobs, error) {
	if !c.acquire() {
		return nil, errClosed
	}
	defer c.life.RUnlock()
	n := []int32{0}
	if err := c.fail(values(c.h, id, nil, 0, n)); err != nil {
		return nil, err
	}
	lp := make([]float32, n[0])
	if err := c.fail(values(c.h, id, lp, len(lp), n)); err != nil {
		return nil, err
	}
	out := make([]TokenLogprobs, len(lp))
	for j := range lp {
		m := []int32{0}
		tokens, logprobs := make([]int32, 20), make([]float32, 20)
		if err := c.fail(top(c.h, id, j, tokens, logprobs, len(tokens), m)); err != nil {
			return nil, err
		}
		out[j] = TokenLogprobs{Token: NoToken, Logprob: lp[j], Top: topOf(tokens[:m[0]], logprobs[:m[0]])}
		if j < len(toks) {
			out[j].Token = toks[j]
		}
	}
	return out, nil
}

func (c *Context) eventText(i int) (string, error) {
	if c.textBuf == nil {
		c.textBuf = make([]byte, 256)
	}
	n := capi.Kvt_events_text_copy(c.ev, i, c.textBuf, len(c.textBuf))
	if n < 0 {
		return "", newError(capi.Enum_SS_kvt_status(-n), "kvt_events_text")
	}
	if n >= len(c.textBuf) {
		c.textBuf = make([]byte, n+1)
		capi.Kvt_events_text_copy(c.ev, i, c.textBuf, len(c.textBuf))
	}
	return string(c.textBuf[:n]), nil
}

// Run drives the context until ctx is done: it steps while sequences are unfinished and
// waits for the next Add otherwise. It returns ctx.Err(), or the error of a failed step.
func (c *Context) Run(ctx context.Context) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if c.NumUnfinished() == 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-c.wake:
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		if _, err := c.Step(); err != nil {
			return err
		}
	}
}

// Stream adds a request and returns its events; the channel is closed after the final
// event. Cancelling ctx cancels the sequence. Someone must drive the context (Run).
func (c *Context) Stream(ctx context.Context, req Request) (<-chan Event, error) {
	s, err := c.Add(req)
	if err != nil {
		return nil, err
	}
	out := make(chan Event, cap(s.events))
	go func() {
		defer close(out)
		defer s.Close()
		done := ctx.Done()
		for {
			// A cancelled ctx wins over events already waiting.
			if done != nil {
				select {
				case <-done:
					s.Cancel() // the final event (cancelled) follows
					done = nil
				default:
				}
			}
			select {
			case e, ok := <-s.events:
				if !ok {
					return
				}
				out <- e
				if e.Final() {
					return
				}
			case <-done:
				s.Cancel() // the final event (cancelled) follows
				done = nil
			}
		}
	}()
	return out, nil
}

// Generate adds a request and steps the context until it finishes (other sequences
// progress too); cancelling ctx cancels the sequence.
func (c *Context) Generate(ctx context.Context, req Request) ([]int32, FinishReason, error) {
	s, err := c.Add(req)
	if err != nil {
		return nil, FinishNone, err
	}
	defer s.Close()
	cancelled := false
	for !s.Finished() {
		if !cancelled && ctx.Err() != nil {
			s.Cancel()
			cancelled = true
		}
		if _, err := c.Step(); err != nil {
			return nil, FinishNone, err
		}
	}
	toks, err := s.Tokens()
	if err != nil {
		return nil, FinishNone, err
	}
	return toks, s.FinishReason(), nil
}

// Cancel cancels a waiting, running or paused sequence; the next step reports it.
func (c *Context) Cancel(id int64) error {
	if !c.acquire() {
		return errClosed
	}
	defer c.life.RUnlock()
	return c.fail(capi.Kvt_sequence_cancel(c.h, id))
}

// State returns a sequence's state and finish reason.
func (c *Context) State(id int64) (SequenceState, FinishReason, error) {
	if !c.acquire() {
		return 0, 0, errClosed
	}
	defer c.life.RUnlock()
	state, reason := []int32{0}, []int32{0}
	if err := c.fail(capi.Kvt_sequence_status(c.h, id, state, reason)); err != nil {
		return 0, 0, err
	}
	return SequenceState(state[0]), FinishReason(reason[0]), nil
}

// Tokens returns the tokens generated so far by a sequence whose record is kept.
func (c *Context) Tokens(id int64) ([]int32, error) {
	return c.tokenList(id, capi.Kvt_sequence_tokens)
}

// PromptTokens returns a sequence's prompt as it was added (a text prompt tokenized, chat
// messages in the model's chat format), while its record is kept.
func (c *Context) PromptTokens(id int64) ([]int32, error) {
	return c.tokenList(id, capi.Kvt_sequence_prompt_tokens)
}

// tokenList returns the tokens fn (kvt_sequence_tokens or kvt_sequence_prompt_tokens) copies.
func (c *Context) tokenList(id int64,
	fn func(capi.Struct_SS_kvt_context, int64, []int32, int, []int32) capi.Enum_SS_kvt_status) ([]int32, error) {
	if !c.acquire() {
		return nil, errClosed
	}
	defer c.life.RUnlock()
	n := []int32{0}
	if err := c.fail(fn(c.h, id, nil, 0, n)); err != nil {
		return nil, err
	}
	buf := make([]int32, n[0])
	if err := c.fail(fn(c.h, id, buf, len(buf), n)); err != nil {
		return nil, err
	}
	if int(n[0]) < len(buf) {
		buf = buf[:n[0]]
	}
	return buf, nil
}

// Text returns the text generated so far by a sequence whose record is kept
// (StatusUnsupported when the model has no tokenizer).
func (c *Context) Text(id int64) (string, error) {
	if !c.acquire() {
		return "", errClosed
	}
	defer c.life.RUnlock()
	n := []int32{0}
	if err := c.fail(capi.Kvt_sequence_text(c.h, id, nil, 0, n)); err != nil {
		return "", err
	}
	buf := make([]byte, n[0]+1)
	if err := c.fail(capi.Kvt_sequence_text(c.h, id, buf, len(buf), n)); err != nil {
		return "", err
	}
	if int(n[0]) > len(buf)-1 {
		n[0] = int32(len(buf) - 1)
	}
	return string(buf[:n[0]]), nil
}

// NumUnfinished is the number of sequences waiting, running or paused.
func (c *Context) NumUnfinished() int {
	if !c.acquire() {
		return 0
	}
	defer c.life.RUnlock()
	return capi.Kvt_context_num_unfinished(c.h)
}

// StatsJSON returns the statistics as a JSON object.
func (c *Context) StatsJSON() (string, error) {
	return c.contextText(capi.Kvt_context_stats_json)
}

// Stat returns one statistic by its JSON name, e.g. "tiers.gpu.used_bytes".
func (c *Context) Stat(name string) (int64, error) {
	if !c.acquire() {
		return 0, errClosed
	}
	defer c.life.RUnlock()
	v := []int64{0}
	if err := c.fail(capi.Kvt_context_stat(c.h, name, v)); err != nil {
		return 0, err
	}
	return v[0], nil
}

// MetricsText returns the statistics in the Prometheus text exposition format (version
// 0.0.4), to serve on /metrics as they are: counters, gauges (tier usage) and histograms
// of time to first token, inter-token latency and step duration.
func (c *Context) MetricsText() (string, error) {
	return c.contextText(capi.Kvt_context_metrics_text)
}

// contextTextFn is kvt_context_stats_json or kvt_context_metrics_text.
type contextTextFn func(capi.Struct_SS_kvt_context, []byte, int, []int32) capi.Enum_SS_kvt_status

// contextText returns the whole text fn writes for the context.
func (c *Context) contextText(fn contextTextFn) (string, error) {
	if !c.acquire() {
		return "", errClosed
	}
	defer c.life.RUnlock()
	n := []int32{0}
	return copyGrowingText(func(buf []byte) (int, error) {
		err := c.fail(fn(c.h, buf, len(buf), n))
		return int(n[0]), err
	})
}

// copyGrowingText returns the whole text call copies: call copies it into buf
// (NUL-terminated, cut short when it does not fit) and returns its full length. The length
// a first call reports can be too small by the time of the copy (the stepping and I/O
// threads move the counters in between, and a number can gain a digit), so the copy is made
// again, in a buffer at least twice as large, until the text fits.
func copyGrowingText(call func(buf []byte) (int, error)) (string, error) {
	var buf []byte // the first call only sizes the text
	for {
		n, err := call(buf)
		if err != nil {
			return "", err
		}
		if n < len(buf) { // all of it, and its NUL
			return string(buf[:n]), nil
		}
		// Room to spare, so a counter that grows between the calls rarely costs another copy.
		size := n + 1 + 256
		if size < 2*len(buf) {
			size = 2 * len(buf)
		}
		buf = make([]byte, size)
	}
}

// UnpinPrefixes releases every prefix pinned by a Request with PinPrefix; the blocks stay
// cached but become evictable.
func (c *Context) UnpinPrefixes() error {
	if !c.acquire() {
		return errClosed
	}
	defer c.life.RUnlock()
	return c.fail(capi.Kvt_context_unpin_prefixes(c.h))
}

// SequenceError says why a sequence finished with FinishError ("" when it did not fail),
// while its record is kept.
func (c *Context) SequenceError(id int64) (string, error) {
	if !c.acquire() {
		return "", errClosed
	}
	defer c.life.RUnlock()
	n := []int32{0}
	if err := c.fail(capi.Kvt_sequence_error(c.h, id, nil, 0, n)); err != nil {
		return "", err
	}
	buf := make([]byte, n[0]+1)
	if err := c.fail(capi.Kvt_sequence_error(c.h, id, buf, len(buf), n)); err != nil {
		return "", err
	}
	return cString(buf), nil
}

// closeSequence forgets a finished sequence, or cancels a running one whose record Step
// releases when it finishes.
func (c *Context) closeSequence(s *Sequence) {
	if !c.acquire() {
		return
	}
	defer c.life.RUnlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open[s.id] != s {
		return
	}
	if s.Finished() {
		delete(c.open, s.id)
		capi.Kvt_sequence_release(c.h, s.id)
	} else {
		s.closeRequested = true
		capi.Kvt_sequence_cancel(c.h, s.id)
	}
}

// Close frees the context; open Sequences receive a final cancelled event.
func (c *Context) Close() error {
	c.life.Lock()
	defer c.life.Unlock()
	if c.h == nil {
		return nil
	}
	c.mu.Lock()
	for id, s := range c.open {
		s.deliver(Event{SequenceID: id, Token: NoToken, Finish: FinishCancelled})
	}
	c.open = map[int64]*Sequence{}
	c.mu.Unlock()
	capi.Kvt_events_free(c.ev)
	capi.Kvt_context_free(c.h)
	c.h, c.ev = nil, nil
	return nil
}
