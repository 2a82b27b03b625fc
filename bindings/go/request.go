package kvtier

import (
	"strings"

	"github.com/kvtier/kvtier/bindings/go/internal/capi"
)

// Options configure a context; the zero value of a field keeps the library default.
// Any key of kvtier.h (e.g. "preemption", "max_tokens_per_step") can be given in Ints or
// Strings; sizes in Strings accept "64MiB".
type Options struct {
	Backend     string // "auto" | "cpu" | "cuda"
	Threads     int
	GPUKVBytes  int64
	HostKVBytes int64
	DiskKVBytes int64
	DiskPath    string
	BlockTokens int
	MaxRunning  int
	MaxWaiting  int
	Ints        map[string]int64
	Strings     map[string]string
	// Progress, when set, hears NewContext's stages and may cancel it (see ProgressFunc).
	Progress ProgressFunc
}

func (o *Options) native() (capi.Struct_SS_kvt_options, error) {
	box := capi.New_kvt_options_box()
	defer capi.Delete_kvt_options_box(box)
	if st := capi.Kvt_options_create(box); st != 0 {
		return nil, newError(st, "kvt_options_create")
	}
	h := capi.Kvt_options_box_value(box)
	if o == nil {
		return h, nil
	}
	ints := map[string]int64{}
	strs := map[string]string{}
	put := func(k string, v int64) {
		if v != 0 {
			ints[k] = v
		}
	}
	put("threads", int64(o.Threads))
	put("gpu_kv_bytes", o.GPUKVBytes)
	put("host_kv_bytes", o.HostKVBytes)
	put("disk_kv_bytes", o.DiskKVBytes)
	put("block_tokens", int64(o.BlockTokens))
	put("max_running", int64(o.MaxRunning))
	put("max_waiting", int64(o.MaxWaiting))
	if o.Backend != "" {
		strs["backend"] = o.Backend
	}
	if o.DiskPath != "" {
		strs["disk_path"] = o.DiskPath
	}
	for k, v := range o.Ints {
		ints[k] = v
	}
	for k, v := range o.Strings {
		strs[k] = v
	}
	for k, v := range ints {
		if st := capi.Kvt_options_set_int(h, k, v); st != 0 {
			err := newError(st, capi.Kvt_options_errmsg(h))
			capi.Kvt_options_free(h)
			return nil, err
		}
	}
	for k, v := range strs {
		if st := capi.Kvt_options_set_string(h, k, v); st != 0 {
			err := newError(st, capi.Kvt_options_errmsg(h))
			capi.Kvt_options_free(h)
			return nil, err
		}
	}
	return h, nil
}

// Request is one generation request. Zero fields keep the defaults: the model's
// generation_config.json where it has them (see Model.InfoJSON), else greedy, 16 new
// tokens; the model's eos ids stop. Greedy forces temperature 0 over a sampling default.
type Request struct {
	Prompt       []int32
	PromptText   string        // the prompt as text, tokenized by the model's tokenizer
	Chat         []ChatMessage // the prompt as chat messages, in the model family's format
	StopStrings  []string      // stop when the decoded text contains one (not part of the output)
	MaxNewTokens int
	Temperature  float32
	TopK         int
	TopP         float32
	Seed         int64
	StopTokens   []int32
	IgnoreEOS    bool
	Priority     int
	Greedy       bool // temperature 0 whatever the model's defaults say (Temperature is ignored)
	// PinPrefix keeps the prompt's full KV blocks on the device tier once computed (never
	// evicted) until Context.UnpinPrefixes.
	PinPrefix bool
	// CacheNamespace ("" = the default one): cached prompt prefixes are shared only between
	// requests of the same namespace, so one tenant's requests never reuse another's. It
	// never changes the generated tokens. At most 256 bytes of UTF-8, no NUL.
	CacheNamespace string

	// The sampler chain (kvtier.h gives the order). Zero keeps each default: off, except a
	// repetition penalty the model's generation_config.json gives.
	MinP              float32           // keep probabilities >= MinP x the largest, 0..1
	RepetitionPenalty float32           // over prompt and generated tokens, > 0 (1 = off)
	PresencePenalty   float32           // over generated tokens, -2..2
	FrequencyPenalty  float32           // over generated tokens, -2..2
	LogitBias         map[int32]float32 // token -> bias added to its logit, -100..100

	// Log-probabilities of the model's raw distribution: with Logprobs each generated
	// token's (Event.Logprobs, Context.Logprobs) with TopLogprobs (0..20) alternatives;
	// with PromptLogprobs each prompt token's from the second on (Context.PromptLogprobs)
	// with PromptTopLogprobs alternatives.
	Logprobs          bool
	TopLogprobs       int
	PromptLogprobs    bool
	PromptTopLogprobs int

	// N completions of the prompt sharing its KV blocks (Context.AddCompletions); completion
	// i draws from Seed + i. 0 or 1: one.
	N int
	// Structured output (one of the two): the generated text must be JSON valid against
	// JSONSchema (the subset tool definitions use), or a sentence of Grammar (GBNF, as
	// llama.cpp writes it). The sequence then ends with FinishGrammar once complete.
	// Errors name where the schema or grammar is wrong.
	JSONSchema string
	Grammar    string
}

// ChatMessage is one message of a chat prompt (role "system", "user" or "assistant").
type ChatMessage struct {
	Role, Content string
}

func (r *Request) maxEvents() int {
	if r.MaxNewTokens > 0 {
		return r.MaxNewTokens + 2
	}
	return 18
}

func (r *Request) native() (capi.Struct_SS_kvt_request, error) {
	box := capi.New_kvt_request_box()
	defer capi.Delete_kvt_request_box(box)
	if st := capi.Kvt_request_create(box); st != 0 {
		return nil, newError(st, "kvt_request_create")
	}
	h := capi.Kvt_request_box_value(box)
	steps := []func() capi.Enum_SS_kvt_status{}
	if len(r.Prompt) > 0 {
		steps = append(steps, func() capi.Enum_SS_kvt_status {
			return capi.Kvt_request_set_prompt_tokens(h, r.Prompt, len(r.Prompt))
		})
	}
	if r.PromptText != "" {
		steps = append(steps, func() capi.Enum_SS_kvt_status { return capi.Kvt_request_set_prompt_text(h, r.PromptText) })
	}
	for _, m := range r.Chat {
		m := m
		steps = append(steps, func() capi.Enum_SS_kvt_status { return capi.Kvt_request_add_chat_message(h, m.Role, m.Content) })
	}
	for _, stop := range r.StopStrings {
		stop := stop
		steps = append(steps, func() capi.Enum_SS_kvt_status { return capi.Kvt_request_add_stop_string(h, stop) })
	}
	if r.MaxNewTokens != 0 {
		steps = append(steps, func() capi.Enum_SS_kvt_status { return capi.Kvt_request_set_max_new_tokens(h, r.MaxNewTokens) })
	}
	if r.Greedy {
		steps = append(steps, func() capi.Enum_SS_kvt_status { return capi.Kvt_request_set_temperature(h, 0) })
	} else if r.Temperature != 0 {
		steps = append(steps, func() capi.Enum_SS_kvt_status { return capi.Kvt_request_set_temperature(h, r.Temperature) })
	}
	if r.TopK != 0 {
		steps = append(steps, func() capi.Enum_SS_kvt_status { return capi.Kvt_request_set_top_k(h, r.TopK) })
	}
	if r.TopP != 0 {
		steps = append(steps, func() capi.Enum_SS_kvt_status { return capi.Kvt_request_set_top_p(h, r.TopP) })
	}
	if r.Seed != 0 {
		steps = append(steps, func() capi.Enum_SS_kvt_status { return capi.Kvt_request_set_seed(h, r.Seed) })
	}
	if len(r.StopTokens) > 0 {
		steps = append(steps, func() capi.Enum_SS_kvt_status {
			return capi.Kvt_request_set_stop_tokens(h, r.StopTokens, len(r.StopTokens))
		})
	}
	if r.IgnoreEOS {
		steps = append(steps, func() capi.Enum_SS_kvt_status { return capi.Kvt_request_set_ignore_eos(h, 1) })
	}
	if r.Priority != 0 {
		steps = append(steps, func() capi.Enum_SS_kvt_status { return capi.Kvt_request_set_priority(h, r.Priority) })
	}
	if r.CacheNamespace != "" {
		// A C string: a NUL inside would cut it short, and name another namespace.
		if strings.IndexByte(r.CacheNamespace, 0) >= 0 {
			capi.Kvt_request_free(h)
			return nil, &Error{Status: StatusInvalidArgument, Message: "the cache namespace contains a NUL byte"}
		}
		steps = append(steps, func() capi.Enum_SS_kvt_status { return capi.Kvt_request_set_cache_namespace(h, r.CacheNamespace) })
	}
	if r.JSONSchema != "" {
		steps = append(steps, func() capi.Enum_SS_kvt_status { return capi.Kvt_request_set_json_schema(h, r.JSONSchema) })
	}
	if r.Grammar != "" {
		steps = append(steps, func() capi.Enum_SS_kvt_status { return capi.Kvt_request_set_grammar(h, r.Grammar) })
	}
	if r.PinPrefix {
		steps = append(steps, func() capi.Enum_SS_kvt_status { return capi.Kvt_request_set_pin_prefix(h, 1) })
	}
	steps = append(steps, r.samplingSteps(h)...)
	for _, step := range steps {
		if st := step(); st != 0 {
			err := newError(st, capi.Kvt_request_errmsg(h))
			capi.Kvt_request_free(h)
			return nil, err
		}
	}
	return h, nil
}

// samplingSteps sets the sampler chain, log-probability and completion fields.
func (r *Request) samplingSteps(h capi.Struct_SS_kvt_request) []func() capi.Enum_SS_kvt_status {
	var steps []func() capi.Enum_SS_kvt_status
	floats := []struct {
		value float32
		set   func(capi.Struct_SS_kvt_request, float32) capi.Enum_SS_kvt_status
	}{
		{r.MinP, capi.Kvt_request_set_min_p},
		{r.RepetitionPenalty, capi.Kvt_request_set_repetition_penalty},
		{r.PresencePenalty, capi.Kvt_request_set_presence_penalty},
		{r.FrequencyPenalty, capi.Kvt_request_set_frequency_penalty},
	}
	for _, f := range floats {
		if f.value != 0 {
			f := f
			steps = append(steps, func() capi.Enum_SS_kvt_status { return f.set(h, f.value) })
		}
	}
	if len(r.LogitBias) > 0 {
		tokens := make([]int32, 0, len(r.LogitBias))
		biases := make([]float32, 0, len(r.LogitBias))
		for t, b := range r.LogitBias {
			tokens = append(tokens, t)
			biases = append(biases, b)
		}
		steps = append(steps, func() capi.Enum_SS_kvt_status {
			return capi.Kvt_request_set_logit_bias(h, tokens, biases, len(tokens))
		})
	}
	if r.Logprobs {
		steps = append(steps, func() capi.Enum_SS_kvt_status { return capi.Kvt_request_set_logprobs(h, r.TopLogprobs) })
	}
	if r.PromptLogprobs {
		steps = append(steps, func() capi.Enum_SS_kvt_status {
			return capi.Kvt_request_set_prompt_logprobs(h, r.PromptTopLogprobs)
		})
	}
	if r.N != 0 {
		steps = append(steps, func() capi.Enum_SS_kvt_status { return capi.Kvt_request_set_n(h, r.N) })
	}
	return steps
}

// completions is how many sequences the request adds.
func (r *Request) completions() int {
	if r.N > 1 {
		return r.N
	}
	return 1
}
