// Statuses, finish reasons, events, errors and the library-wide calls (version, live
// handles). Safe for concurrent use.

package kvtier

import (
	"bytes"
	"fmt"

	"github.com/kvtier/kvtier/bindings/go/internal/capi"
)

// Status is a C API status code (kvt_status).
type Status int

// The statuses, in the order and with the values of kvtier.h.
const (
	StatusOK              Status = iota // success (never in an *Error)
	StatusInvalidArgument               // a parameter is out of range or malformed
	StatusNotFound                      // unknown sequence id, missing file or tensor
	StatusUnsupported                   // architecture, dtype, tokenizer or backend not supported
	StatusCapacity                      // the request can never fit in the configured memory
	StatusBusy                          // the waiting queue is full: retry later (back-pressure)
	StatusIO                            // a file could not be read or written
	StatusCorrupt                       // a file or stored block failed validation
	StatusOutOfMemory                   // an allocation at creation time failed
	StatusState                         // the call is not valid in the object's current state
	StatusBackend                       // the compute backend failed (e.g. CUDA error)
	StatusInternal                      // a bug in kvtier: please report it
	StatusCancelled                     // a progress function asked the call to stop
)

// String is the C name, e.g. "KVT_ERR_BUSY".
func (s Status) String() string { return capi.Kvt_status_string(capi.Enum_SS_kvt_status(s)) }

// Error is returned by every failing call: the status and the library's message.
type Error struct {
	Status  Status
	Message string
}

// Error formats the status and the message, e.g. "KVT_ERR_BUSY: waiting queue full".
func (e *Error) Error() string { return e.Status.String() + ": " + e.Message }

// FinishReason says why a sequence stopped (kvt_finish_reason).
type FinishReason int

// The finish reasons, with the values of kvtier.h.
const (
	FinishNone      FinishReason = iota // still running
	FinishStop                          // a stop/eos token or a stop string was produced
	FinishLength                        // MaxNewTokens reached, or the context is full
	FinishCancelled                     // cancelled (Sequence.Cancel, a done context.Context, Close)
	FinishError                         // the sequence failed alone
	// FinishGrammar: the output is complete per the request's JSONSchema or Grammar. A
	// constrained sequence that ends any other way (FinishLength, ...) is incomplete.
	FinishGrammar
)

// String is the lower-case name, e.g. "length".
func (r FinishReason) String() string {
	switch r {
	case FinishNone:
		return "none"
	case FinishStop:
		return "stop"
	case FinishLength:
		return "length"
	case FinishCancelled:
		return "cancelled"
	case FinishError:
		return "error"
	case FinishGrammar:
		return "grammar"
	}
	return fmt.Sprintf("FinishReason(%d)", int(r))
}

// SequenceState says where a sequence is in its life (kvt_sequence_state).
type SequenceState int

// The sequence states, with the values of kvtier.h.
const (
	StateWaiting  SequenceState = iota // admitted, not yet scheduled
	StateRunning                       // prefilling or decoding
	StatePaused                        // preempted: KV swapped out or dropped for recompute
	StateFinished                      // see its FinishReason
)

// NoToken marks an event that carries no token (a cancellation or failure).
const NoToken = -1

// Event is one event of a step: a sequence produced a token and/or finished.
type Event struct {
	SequenceID int64
	Token      int32
	Text       string // what the token completed (never a partial character); "" when none
	Finish     FinishReason
	Logprobs   *TokenLogprobs // the token's, when its Request asked (Logprobs); else nil
}

// TokenLogprob is a token and its log-probability.
type TokenLogprob struct {
	Token   int32
	Logprob float32
}

// TokenLogprobs is a token's log-probability under the model's raw distribution and its
// most likely alternatives, most likely first. In Context.PromptLogprobs, Token is
// NoToken: entry j scores the prompt's token j + 1.
type TokenLogprobs struct {
	Token   int32
	Logprob float32
	Top     []TokenLogprob
}

// HasToken reports whether the event carries a token.
func (e Event) HasToken() bool { return e.Token != NoToken }

// Final reports whether the sequence finished with this event.
func (e Event) Final() bool { return e.Finish != FinishNone }

// Version is the run-time version of the loaded library, e.g. "0.1.0".
func Version() string { return capi.Kvt_version_string() }

// VersionNumbers returns major, minor and patch of the loaded library.
func VersionNumbers() (major, minor, patch int) {
	return capi.Kvt_version_major(), capi.Kvt_version_minor(), capi.Kvt_version_patch()
}

// LiveHandles is the number of native handles alive in the process; 0 once every Model
// and Context is closed.
func LiveHandles() int64 { return capi.Kvt_live_handles() }

func newError(status capi.Enum_SS_kvt_status, message string) error {
	if status == 0 {
		return nil
	}
	return &Error{Status: Status(status), Message: message}
}

// cString is the NUL-terminated string at the start of buf.
func cString(buf []byte) string {
	if i := bytes.IndexByte(buf, 0); i >= 0 {
		return string(buf[:i])
	}
	return string(buf)
}
