// Tests of the sampler chain, log-probabilities and parallel sampling in the Go binding:
// the same tokens as the kvtier CLI for the same request, log-probabilities on events and
// from the context alike, completions equal to their solo runs, inputs refused.
package kvtier

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"reflect"
	"testing"
)

func controlsRequest(seed int64) Request {
	return Request{Prompt: []int32{5, 6, 7, 8, 9, 5, 6}, MaxNewTokens: 6, IgnoreEOS: true, Temperature: 0.9,
		Seed: seed, MinP: 0.01, RepetitionPenalty: 1.2, PresencePenalty: 0.5, FrequencyPenalty: 0.5,
		LogitBias: map[int32]float32{11: 1.5}, Logprobs: true, TopLogprobs: 3}
}

func TestSamplerControlsAndLogprobs(t *testing.T) {
	defer checkNoLeaks(t)
	out, err := exec.Command(os.Getenv("KVTIER_CLI"), "run", "--model", modelDir, "--prompt-ids", "5,6,7,8,9,5,6",
		"--max-tokens", "6", "--ignore-eos", "--backend", "cpu", "--temperature", "0.9", "--seed", "40",
		"--min-p", "0.01", "--repetition-penalty", "1.2", "--presence-penalty", "0.5", "--frequency-penalty", "0.5",
		"--logit-bias", "11:1.5", "--logprobs", "3", "--json").Output()
	if err != nil {
		t.Fatalf("kvtier run: %v", err)
	}
	var cli struct {
		Sequences []struct {
			Tokens   []int32 `json:"tokens"`
			Logprobs []struct {
				Logprob float32 `json:"logprob"`
			} `json:"logprobs"`
		} `json:"sequences"`
	}
	if err := json.Unmarshal(out, &cli); err != nil || len(cli.Sequences) != 1 {
		t.Fatalf("kvtier run output: %v\n%s", err, out)
	}
	m, err := LoadModel(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewContext(m, cpu())
	m.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := controlsRequest(40)
	req.PromptLogprobs = true
	req.PromptTopLogprobs = 2
	s, err := c.Add(req)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var toks []int32
	var events []*TokenLogprobs
	for !s.Finished() {
		evs, err := c.Step()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.HasToken() {
				toks = append(toks, e.Token)
				events = append(events, e.Logprobs)
			}
		}
	}
	if !reflect.DeepEqual(toks, cli.Sequences[0].Tokens) {
		t.Fatalf("tokens %v, the CLI %v", toks, cli.Sequences[0].Tokens)
	}
	stored, err := c.Logprobs(s.ID())
	if err != nil || len(stored) != len(toks) {
		t.Fatalf("Logprobs %v %v", stored, err)
	}
	for i, e := range events {
		if e == nil || e.Token != toks[i] || len(e.Top) != 3 || e.Logprob != cli.Sequences[0].Logprobs[i].Logprob ||
			!reflect.DeepEqual(*e, stored[i]) || e.Top[0].Logprob < e.Top[2].Logprob || e.Logprob > 0 {
			t.Fatalf("event %d logprobs %+v, stored %+v", i, e, stored[i])
		}
	}
	prompt, err := c.PromptLogprobs(s.ID())
	if err != nil || len(prompt) != 6 || len(prompt[0].Top) != 2 || prompt[0].Token != NoToken ||
		math.IsNaN(float64(prompt[5].Logprob)) {
		t.Fatalf("PromptLogprobs %+v %v", prompt, err)
	}

	// A request without logprobs: none on events, StatusState from the readers.
	plain, err := c.Add(Request{Prompt: []int32{5, 6}, MaxNewTokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	evs, err := c.Step()
	if err != nil || len(evs) != 1 || evs[0].Logprobs != nil {
		t.Fatalf("events %+v %v", evs, err)
	}
	_, err = c.Logprobs(plain.ID())
	wantError(t, err, StatusState, "logprobs")

	// Bad settings are refused, naming the field.
	for _, bad := range []struct {
		req    Request
		substr string
	}{
		{Request{Prompt: []int32{5}, RepetitionPenalty: -1}, "repetition_penalty"},
		{Request{Prompt: []int32{5}, PresencePenalty: 3}, "presence_penalty"},
		{Request{Prompt: []int32{5}, FrequencyPenalty: float32(math.NaN())}, "frequency_penalty"},
		{Request{Prompt: []int32{5}, MinP: 2}, "min_p"},
		{Request{Prompt: []int32{5}, LogitBias: map[int32]float32{-1: 1}}, "negative"},
		{Request{Prompt: []int32{5}, LogitBias: map[int32]float32{1 << 30: 1}}, "vocabulary"},
		{Request{Prompt: []int32{5}, Logprobs: true, TopLogprobs: 21}, "logprobs"},
		{Request{Prompt: []int32{5}, PromptLogprobs: true, PromptTopLogprobs: -2}, "prompt_logprobs"},
		{Request{Prompt: []int32{5}, N: 2}, "AddCompletions"},
	} {
		_, err := c.Add(bad.req)
		wantError(t, err, StatusInvalidArgument, bad.substr)
	}
	_, err = c.AddCompletions(Request{Prompt: []int32{5}, N: 200})
	wantError(t, err, StatusInvalidArgument, "n must be")
}

func TestCompletionsEqualTheirSoloRuns(t *testing.T) {
	defer checkNoLeaks(t)
	m, err := LoadModel(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewContext(m, cpu())
	m.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := controlsRequest(70)
	req.N = 3
	seqs, err := c.AddCompletions(req)
	if err != nil || len(seqs) != 3 {
		t.Fatalf("AddCompletions %v %v", seqs, err)
	}
	for !seqs[0].Finished() || !seqs[1].Finished() || !seqs[2].Finished() {
		if _, err := c.Step(); err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range seqs {
		if s.ID() != seqs[0].ID()+int64(i) {
			t.Fatalf("completion %d has id %d", i, s.ID())
		}
		got, err := s.Tokens()
		if err != nil {
			t.Fatal(err)
		}
		solo := controlsRequest(70 + int64(i))
		want, _, err := c.Generate(context.Background(), solo)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("completion %d: %v, alone %v (%v)", i, got, want, err)
		}
		s.Close()
	}
	if v, err := c.Stat("parallel_sampling.forks"); err != nil || v != 2 {
		t.Fatalf("forks %d %v", v, err)
	}
}
