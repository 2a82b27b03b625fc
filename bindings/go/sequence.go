package kvtier

import "sync/atomic"

// Sequence is a sequence added to a Context. Its events arrive on Events() as the context
// is stepped; the channel is closed after the final event. Close cancels it if it is still
// running and forgets its record.
type Sequence struct {
	ctx    *Context
	id     int64
	events chan Event // buffered for every event the sequence can report: Step never blocks
	finish atomic.Int32
	// guarded by ctx.mu
	closeRequested bool
}

// ID is the sequence id (> 0, never reused in a context).
func (s *Sequence) ID() int64 { return s.id }

// Events delivers the sequence's events; closed after the final one.
func (s *Sequence) Events() <-chan Event { return s.events }

// Finished reports whether the final event has been delivered.
func (s *Sequence) Finished() bool { return s.finish.Load() != int32(FinishNone) }

// FinishReason is FinishNone until the final event has been delivered.
func (s *Sequence) FinishReason() FinishReason { return FinishReason(s.finish.Load()) }

// Cancel asks the engine to stop the sequence; the next step reports FinishCancelled.
func (s *Sequence) Cancel() error { return s.ctx.Cancel(s.id) }

// Tokens returns the tokens generated so far.
func (s *Sequence) Tokens() ([]int32, error) { return s.ctx.Tokens(s.id) }

// PromptTokens returns the prompt as it was added (tokenized, in the chat format).
func (s *Sequence) PromptTokens() ([]int32, error) { return s.ctx.PromptTokens(s.id) }

// Text returns the text generated so far.
func (s *Sequence) Text() (string, error) { return s.ctx.Text(s.id) }

// ErrorMessage says why the sequence finished with FinishError ("" otherwise).
func (s *Sequence) ErrorMessage() (string, error) { return s.ctx.SequenceError(s.id) }

// Close releases the sequence (cancelling it first if it is still running).
func (s *Sequence) Close() error {
	s.ctx.closeSequence(s)
	return nil
}

// deliver is called with ctx.mu held; it reports whether e was the final event.
func (s *Sequence) deliver(e Event) bool {
	if s.Finished() {
		return false
	}
	select {
	case s.events <- e:
	default: // cannot happen: the buffer holds every event
	}
	if e.Final() {
		s.finish.Store(int32(e.Finish))
		close(s.events)
	}
	return e.Final()
}
