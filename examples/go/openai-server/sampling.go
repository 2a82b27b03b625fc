// The parameters chat and text completions share — sampling, n, stop, max_tokens, seed,
// penalties, logit_bias, structured output, streaming — read and checked into the
// kvtier.Request that runs them.

package main

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"math"
	"strconv"
	"strings"

	kvtier "github.com/kvtier/kvtier/bindings/go"
)

// sharedParams are the parameters of both endpoints; ignoredParams are accepted and have no
// effect here (they label requests for OpenAI's own bookkeeping).
var (
	sharedParams = []string{"model", "stream", "stream_options", "n", "max_tokens", "temperature", "top_p", "seed",
		"stop", "presence_penalty", "frequency_penalty", "logit_bias", "top_k", "min_p", "repetition_penalty"}
	ignoredParams = []string{"user", "metadata", "store", "service_tier"}
)

// knownParams is the set of parameters an endpoint reads or ignores.
func knownParams(own ...string) map[string]bool {
	known := map[string]bool{}
	for _, list := range [][]string{sharedParams, ignoredParams, own} {
		for _, name := range list {
			known[name] = true
		}
	}
	return known
}

// generation is what a request asks for, before its prompt is set.
type generation struct {
	req          kvtier.Request // sampling, N, stop strings, max tokens, structured output
	stream       bool
	includeUsage bool // stream_options.include_usage: a last chunk with the usage
}

// readShared reads the shared parameters. defaultMaxTokens applies when the request gives
// none (max_tokens, or max_completion_tokens in chat).
func (s *server) readShared(f fields, defaultMaxTokens int) (*generation, *apiError) {
	g := &generation{}
	if err := f.get("stream", &g.stream); err != nil {
		return nil, err
	}
	var streamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	}
	if err := f.get("stream_options", &streamOptions); err != nil {
		return nil, err
	}
	if f.has("stream_options") && !g.stream {
		return nil, invalid("stream_options", "The 'stream_options' parameter is only allowed when 'stream' is enabled.")
	}
	g.includeUsage = streamOptions.IncludeUsage

	n := 1
	if err := f.get("n", &n); err != nil {
		return nil, err
	}
	if n < 1 || n > 128 {
		return nil, invalid("n", "Invalid 'n': %d. It must be between 1 and 128.", n)
	}
	g.req.N = n

	g.req.MaxNewTokens = defaultMaxTokens
	for _, name := range []string{"max_tokens", "max_completion_tokens"} {
		if !f.has(name) {
			continue
		}
		var max int64
		if err := f.get(name, &max); err != nil {
			return nil, err
		}
		if max < 1 || max > math.MaxInt32 {
			return nil, invalid(name, "Invalid '%s': %d. It must be at least 1.", name, max)
		}
		g.req.MaxNewTokens = int(max)
	}

	if err := s.readSampling(f, &g.req); err != nil {
		return nil, err
	}
	if err := readStop(f, &g.req); err != nil {
		return nil, err
	}
	if err := s.readLogitBias(f, &g.req); err != nil {
		return nil, err
	}
	return g, nil
}

// number reads a float parameter within [min, max]; ok is false when it is absent.
func number(f fields, name string, min, max float64) (value float64, ok bool, err *apiError) {
	if !f.has(name) {
		return 0, false, nil
	}
	if err := f.get(name, &value); err != nil {
		return 0, false, err
	}
	if math.IsNaN(value) || value < min || value > max {
		return 0, false, invalid(name, "Invalid '%s': %v. It must be between %v and %v.", name, value, min, max)
	}
	return value, true, nil
}

// readSampling reads the sampler chain. Parameters not given keep the model's
// generation_config.json defaults (kvtier's, and vLLM's, rule), not OpenAI's.
func (s *server) readSampling(f fields, req *kvtier.Request) *apiError {
	if t, ok, err := number(f, "temperature", 0, 2); err != nil {
		return err
	} else if ok {
		req.Temperature = float32(t)
		req.Greedy = t == 0
	}
	if p, ok, err := number(f, "top_p", 0, 1); err != nil {
		return err
	} else if ok {
		req.TopP = float32(p)
		if p == 0 { // only the most likely token is left
			req.Greedy = true
		}
	}
	if f.has("top_k") {
		var k int
		if err := f.get("top_k", &k); err != nil {
			return err
		}
		if k < 0 {
			return invalid("top_k", "Invalid 'top_k': %d. It must be >= 0 (0: off).", k)
		}
		req.TopK = k
	}
	for _, p := range []struct {
		name     string
		min, max float64
		dst      *float32
	}{
		{"presence_penalty", -2, 2, &req.PresencePenalty},
		{"frequency_penalty", -2, 2, &req.FrequencyPenalty},
		{"min_p", 0, 1, &req.MinP},
		{"repetition_penalty", math.SmallestNonzeroFloat32, math.MaxFloat32, &req.RepetitionPenalty},
	} {
		v, ok, err := number(f, p.name, p.min, p.max)
		if err != nil {
			return err
		}
		if ok {
			*p.dst = float32(v)
		}
	}
	if f.has("seed") {
		if err := f.get("seed", &req.Seed); err != nil {
			return err
		}
	} else {
		req.Seed = randomSeed() // as OpenAI: unseeded requests differ from run to run
	}
	return nil
}

func randomSeed() int64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0
	}
	return int64(binary.LittleEndian.Uint64(b[:]) >> 1)
}

// readStop reads stop: a string or up to 4 strings.
func readStop(f fields, req *kvtier.Request) *apiError {
	if !f.has("stop") {
		return nil
	}
	var one string
	if json.Unmarshal(f["stop"], &one) == nil {
		req.StopStrings = []string{one}
	} else if err := f.get("stop", &req.StopStrings); err != nil {
		return invalid("stop", "Invalid type for 'stop': expected a string or an array of strings.")
	}
	if len(req.StopStrings) > 4 {
		return invalid("stop", "Invalid 'stop': %d sequences; at most 4 are allowed.", len(req.StopStrings))
	}
	kept := req.StopStrings[:0]
	for _, stop := range req.StopStrings {
		if stop != "" {
			kept = append(kept, stop)
		}
	}
	req.StopStrings = kept
	return nil
}

// readLogitBias reads logit_bias: token ids (as strings) to a bias in [-100, 100].
func (s *server) readLogitBias(f fields, req *kvtier.Request) *apiError {
	var bias map[string]float64
	if err := f.get("logit_bias", &bias); err != nil {
		return err
	}
	if len(bias) == 0 {
		return nil
	}
	req.LogitBias = map[int32]float32{}
	for key, value := range bias {
		id, err := strconv.ParseInt(strings.TrimSpace(key), 10, 32)
		if err != nil || id < 0 || id >= int64(s.vocab) {
			return invalid("logit_bias", "Invalid key in 'logit_bias': '%s' is not a token id in [0, %d).", key, s.vocab)
		}
		if value < -100 || value > 100 {
			return invalid("logit_bias", "Invalid value in 'logit_bias' for token %d: %v. It must be between -100 and 100.", id, value)
		}
		req.LogitBias[int32(id)] = float32(value)
	}
	return nil
}

// readResponseFormat reads response_format: text, json_object (any JSON object) or
// json_schema (JSON valid against the schema, which kvtier enforces while sampling).
func readResponseFormat(f fields, req *kvtier.Request) *apiError {
	var format struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	}
	if err := f.get("response_format", &format); err != nil {
		return err
	}
	if !f.has("response_format") {
		return nil
	}
	switch format.Type {
	case "text":
	case "json_object":
		req.JSONSchema = `{"type": "object"}`
	case "json_schema":
		if format.JSONSchema == nil || format.JSONSchema.Name == "" {
			return invalid("response_format", "Missing required parameter: 'response_format.json_schema.name'.")
		}
		req.JSONSchema = `{"type": "object"}`
		if len(format.JSONSchema.Schema) > 0 && string(format.JSONSchema.Schema) != "null" {
			req.JSONSchema = string(format.JSONSchema.Schema)
		}
	default:
		return invalid("response_format", "Invalid value for 'response_format.type': '%s'. Supported values are: 'text', 'json_object' and 'json_schema'.", format.Type)
	}
	return nil
}
