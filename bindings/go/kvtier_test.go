// Tests of the Go binding, mirroring tests/c_api/c_api_test.c. The model directory comes
// from KVTIER_TEST_MODEL, the CLI used as the reference from KVTIER_CLI.
package kvtier

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var modelDir = os.Getenv("KVTIER_TEST_MODEL")

func cpu() *Options { return &Options{Backend: "cpu", Threads: 2} }

func checkNoLeaks(t *testing.T) {
	t.Helper()
	if n := LiveHandles(); n != 0 {
		t.Fatalf("%d native handles leaked", n)
	}
}

func wantError(t *testing.T, err error, status Status, substr string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v, want a *kvtier.Error", err)
	}
	if e.Status != status || !strings.Contains(e.Error(), substr) {
		t.Fatalf("got %v, want %v containing %q", e, status, substr)
	}
}

func TestVersion(t *testing.T) {
	major, _, _ := VersionNumbers()
	if major != 0 || !strings.HasPrefix(Version(), "0.") {
		t.Fatalf("version %q major %d", Version(), major)
	}
	if StatusBusy.String() != "KVT_ERR_BUSY" {
		t.Fatal(StatusBusy.String())
	}
}

func TestBadInputReturnsErrors(t *testing.T) {
	defer checkNoLeaks(t)
	_, err := LoadModel("/nonexistent/kvtier")
	wantError(t, err, StatusNotFound, "")
	m, err := LoadModel(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	_, err = NewContext(m, &Options{Backend: "cpu", Ints: map[string]int64{"block_tokens": -1}})
	wantError(t, err, StatusInvalidArgument, "block_tokens")
	_, err = NewContext(m, &Options{Ints: map[string]int64{"no_such_option": 1}})
	wantError(t, err, StatusInvalidArgument, "no_such_option")
	c, err := NewContext(m, cpu())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Add(Request{})
	wantError(t, err, StatusInvalidArgument, "empty")
	_, err = c.Add(Request{Prompt: []int32{1, 1 << 30}})
	wantError(t, err, StatusInvalidArgument, "vocabulary")
	_, err = c.Add(Request{Prompt: []int32{1, 2}, MaxNewTokens: -1})
	wantError(t, err, StatusInvalidArgument, "max_new_tokens")
	wantError(t, c.Cancel(424242), StatusNotFound, "")
	_, err = c.Stat("no.such.stat")
	wantError(t, err, StatusNotFound, "")
	if c.NumUnfinished() != 0 {
		t.Fatal("a failed add left a sequence")
	}
}

func TestCacheNamespacesShareNoPrefix(t *testing.T) {
	defer checkNoLeaks(t)
	prompt := make([]int32, 40) // two full blocks of 16, plus 8 tokens
	for i := range prompt {
		prompt[i] = int32(3 + (i*7)%200)
	}
	m, err := LoadModel(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c, err := NewContext(m, cpu())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	gen := func(ns string) []int32 {
		t.Helper()
		toks, _, err := c.Generate(context.Background(),
			Request{Prompt: prompt, MaxNewTokens: 4, IgnoreEOS: true, CacheNamespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		return toks
	}
	gpuHits := func() int64 {
		t.Helper()
		v, err := c.Stat("prefix_hits.gpu")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	a := gen("tenant-a")
	if gpuHits() != 0 {
		t.Fatal("hits on a cold cache")
	}
	b := gen("tenant-b")
	if gpuHits() != 0 {
		t.Fatal("tenant-b reused tenant-a's blocks")
	}
	again := gen("tenant-a")
	if gpuHits() != 2 {
		t.Fatalf("tenant-a reused %d blocks, want 2", gpuHits())
	}
	if !reflect.DeepEqual(a, b) || !reflect.DeepEqual(a, again) {
		t.Fatalf("a namespace changed the tokens: %v %v %v", a, b, again)
	}
	gen("t\u00e9nant-\U0001F600")
	_, err = c.Add(Request{Prompt: prompt, CacheNamespace: "a\x00b"})
	wantError(t, err, StatusInvalidArgument, "NUL")
	_, err = c.Add(Request{Prompt: prompt, CacheNamespace: "\xff"})
	wantError(t, err, StatusInvalidArgument, "UTF-8")
	_, err = c.Add(Request{Prompt: prompt, CacheNamespace: strings.Repeat("x", 257)})
	wantError(t, err, StatusInvalidArgument, "256")
	if c.NumUnfinished() != 0 {
		t.Fatal("a refused add left a sequence")
	}
}

// cliTokens is what the C API produces for the same request, via the kvtier CLI.
func cliTokens(t *testing.T, prompt string, maxTokens int, temperature float32, seed int64) []int32 {
	t.Helper()
	out, err := exec.Command(os.Getenv("KVTIER_CLI"), "run", "--model", modelDir, "--prompt-ids", prompt,
		"--max-tokens", fmt.Sprint(maxTokens), "--ignore-eos", "--backend", "cpu",
		"--temperature", fmt.Sprint(temperature), "--seed", fmt.Sprint(seed), "--json").Output()
	if err != nil {
		t.Fatalf("kvtier run: %v", err)
	}
	var parsed struct {
		Sequences []struct {
			Tokens []int32 `json:"tokens"`
		} `json:"sequences"`
	}
	if err := json.Unmarshal(out, &parsed); err != nil || len(parsed.Sequences) != 1 {
		t.Fatalf("kvtier run output: %v\n%s", err, out)
	}
	return parsed.Sequences[0].Tokens
}

func TestGenerationEqualsTheCAPI(t *testing.T) {
	defer checkNoLeaks(t)
	greedy := cliTokens(t, "5,6,7,8,9", 8, 0, 0)
	sampled := cliTokens(t, "10,11,12,13,14", 8, 0.8, 42)
	m, err := LoadModel(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	if m.VocabSize() <= 0 {
		t.Fatal("vocab size")
	}
	if info, err := m.InfoJSON(); err != nil || !strings.Contains(info, "LlamaForCausalLM") {
		t.Fatalf("info %q %v", info, err)
	}
	c, err := NewContext(m, cpu())
	m.Close() // the context keeps its own reference
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	toks, reason, err := c.Generate(context.Background(),
		Request{Prompt: []int32{5, 6, 7, 8, 9}, MaxNewTokens: 8, IgnoreEOS: true})
	if err != nil || !reflect.DeepEqual(toks, greedy) || reason != FinishLength {
		t.Fatalf("Generate = %v %v %v, want %v", toks, reason, err, greedy)
	}

	// Streamed through Run, alongside a sequence cancelled through its context.Context.
	runCtx, stopRun := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- c.Run(runCtx) }()
	cancelCtx, cancel := context.WithCancel(context.Background())
	cancel()
	// Long enough that the stepping goroutine cannot finish it before the cancel lands.
	other, err := c.Stream(cancelCtx, Request{Prompt: []int32{20, 21, 22}, MaxNewTokens: 1000, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	events, err := c.Stream(context.Background(), Request{Prompt: []int32{10, 11, 12, 13, 14},
		MaxNewTokens: 8, IgnoreEOS: true, Temperature: 0.8, Seed: 42})
	if err != nil {
		t.Fatal(err)
	}
	var streamed []int32
	var last Event
	for e := range events {
		if e.HasToken() {
			streamed = append(streamed, e.Token)
		}
		last = e
	}
	if !reflect.DeepEqual(streamed, sampled) || last.Finish != FinishLength {
		t.Fatalf("streamed %v (%v), want %v", streamed, last.Finish, sampled)
	}
	for e := range other {
		last = e
	}
	if last.Finish != FinishCancelled {
		t.Fatalf("cancelled stream ended with %v", last.Finish)
	}
	stopRun()
	if err := <-runDone; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	stats, err := c.StatsJSON()
	if err != nil || !strings.Contains(stats, `"tiers"`) {
		t.Fatalf("stats %q %v", stats, err)
	}
	if v, err := c.Stat("tiers.gpu.used_bytes"); err != nil || v != 0 {
		t.Fatalf("gpu used %d %v", v, err)
	}
	if v, err := c.Stat("generated_tokens"); err != nil || v < 16 {
		t.Fatalf("generated %d %v", v, err)
	}
}

func TestTextAPI(t *testing.T) {
	defer checkNoLeaks(t)
	plain, err := LoadModel(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	if plain.HasTokenizer() {
		t.Fatal("the plain model has no tokenizer")
	}
	_, err = plain.Tokenize("hi", false)
	wantError(t, err, StatusUnsupported, "")
	plain.Close()

	m, err := LoadModel(os.Getenv("KVTIER_TEST_TEXT_MODEL"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !m.HasTokenizer() {
		t.Fatal("no tokenizer")
	}
	text := "h\u00e9llo \u2713 \U0001F642" // 1-, 2-, 3- and 4-byte UTF-8 characters
	ids, err := m.Tokenize(text, false)
	if err != nil || len(ids) != len(text) { // bytes, no merges
		t.Fatalf("Tokenize = %v %v", ids, err)
	}
	if back, err := m.Detokenize(ids, false); err != nil || back != text {
		t.Fatalf("Detokenize = %q %v", back, err)
	}
	if withBOS, _ := m.Tokenize(text, true); len(withBOS) <= len(ids) {
		t.Fatal("no BOS added")
	}
	_, err = m.Detokenize([]int32{1 << 30}, false)
	wantError(t, err, StatusInvalidArgument, "")
	// Each byte token's own bytes, the parts of characters included: together, the text.
	var pieces []byte
	for _, id := range ids {
		b, err := m.TokenBytes(id)
		if err != nil {
			t.Fatal(err)
		}
		pieces = append(pieces, b...)
	}
	if string(pieces) != text {
		t.Fatalf("TokenBytes of %v = %q, want %q", ids, pieces, text)
	}
	withBOS, _ := m.Tokenize(text, true)
	if bos, err := m.TokenBytes(withBOS[0]); err != nil || len(bos) == 0 {
		t.Fatalf("TokenBytes of BOS %d = %q %v, want its text", withBOS[0], bos, err)
	}
	_, err = m.TokenBytes(1 << 30)
	wantError(t, err, StatusInvalidArgument, "")

	c, err := NewContext(m, cpu())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	prompt, _ := m.Tokenize("Hello", true)
	byIDs, _, err := c.Generate(context.Background(), Request{Prompt: prompt, MaxNewTokens: 6, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Add(Request{PromptText: "Hello", MaxNewTokens: 6, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for c.NumUnfinished() > 0 {
		if _, err := c.Step(); err != nil {
			t.Fatal(err)
		}
	}
	var streamed strings.Builder
	for e := range s.Events() {
		streamed.WriteString(e.Text)
	}
	toks, _ := s.Tokens()
	full, err := s.Text()
	if err != nil || !reflect.DeepEqual(toks, byIDs) || full != streamed.String() {
		t.Fatalf("text prompt gave %v %q (streamed %q) %v, token prompt gave %v", toks, full, streamed.String(), err, byIDs)
	}
	if got, err := s.PromptTokens(); err != nil || !reflect.DeepEqual(got, prompt) {
		t.Fatalf("PromptTokens = %v %v, want the text prompt tokenized: %v", got, err, prompt)
	}
}

// A GGUF file loads as the checkpoint directory it holds: the same model writes the same text.
func TestGGUFModel(t *testing.T) {
	defer checkNoLeaks(t)
	var texts []string
	for _, path := range []string{os.Getenv("KVTIER_TEST_TEXT_MODEL"), os.Getenv("KVTIER_TEST_TEXT_GGUF")} {
		m, err := LoadModel(path)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if !m.HasTokenizer() || m.VocabSize() != 258 {
			t.Fatalf("%s: tokenizer %v, vocabulary %d", path, m.HasTokenizer(), m.VocabSize())
		}
		c, err := NewContext(m, cpu())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ids, _, err := c.Generate(context.Background(), Request{PromptText: "Tiers at work", MaxNewTokens: 12, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		text, err := m.Detokenize(ids, false)
		if err != nil || len(ids) != 12 {
			t.Fatalf("%s: %v %q %v", path, ids, text, err)
		}
		texts = append(texts, text)
	}
	if texts[0] != texts[1] {
		t.Fatalf("the directory wrote %q, its GGUF file %q", texts[0], texts[1])
	}
}

func TestStructuredOutput(t *testing.T) {
	defer checkNoLeaks(t)
	m, err := LoadModel(os.Getenv("KVTIER_TEST_TEXT_MODEL"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c, err := NewContext(m, cpu())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Add(Request{PromptText: "x", JSONSchema: `{"type":"string","pattern":"a+"}`})
	wantError(t, err, StatusInvalidArgument, "'pattern' is not supported")
	_, err = c.Add(Request{PromptText: "x", Grammar: "root ::= nothing\n"})
	wantError(t, err, StatusInvalidArgument, "GBNF line 1, column 10")
	for seed := int64(1); seed <= 3; seed++ {
		req := Request{PromptText: "Answer:", MaxNewTokens: 32, Temperature: 1, Seed: seed,
			Grammar: `root ::= "yes" | "no"` + "\n"}
		s, err := c.Add(req)
		if err != nil {
			t.Fatal(err)
		}
		for c.NumUnfinished() > 0 {
			if _, err := c.Step(); err != nil {
				t.Fatal(err)
			}
		}
		for range s.Events() {
		}
		text, _ := s.Text()
		if s.FinishReason() != FinishGrammar || (text != "yes" && text != "no") {
			t.Fatalf("grammar output %q, %v", text, s.FinishReason())
		}
		s.Close()
	}
	schema := `{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"],"additionalProperties":false}`
	toks, reason, err := c.Generate(context.Background(), Request{PromptText: "JSON:", MaxNewTokens: 64, Temperature: 1, JSONSchema: schema})
	if err != nil || reason != FinishGrammar {
		t.Fatalf("schema generation: %v %v", reason, err)
	}
	text, err := m.Detokenize(toks, true)
	var v struct{ Ok *bool }
	if err != nil || json.Unmarshal([]byte(text), &v) != nil || v.Ok == nil {
		t.Fatalf("schema output %q is not {\"ok\": bool}", text)
	}
	if FinishGrammar.String() != "grammar" {
		t.Fatal(FinishGrammar.String())
	}
}

func TestManyGoroutinesAddAndCancelWhileOneSteps(t *testing.T) {
	defer checkNoLeaks(t)
	m, err := LoadModel(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c, err := NewContext(m, &Options{Backend: "cpu", Threads: 2, MaxWaiting: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	runCtx, stopRun := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- c.Run(runCtx) }()

	const goroutines, perGoroutine = 16, 12
	var finished, cancelled, other atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*perGoroutine)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < perGoroutine; i++ {
				req := Request{Prompt: []int32{int32(1 + g), int32(2 + i), 3}, MaxNewTokens: 4 + i%5, IgnoreEOS: true}
				switch i % 3 {
				case 0: // cancelled through its context.Context
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i)*time.Millisecond)
					ch, err := c.Stream(ctx, req)
					if err != nil {
						errs <- err
						cancel()
						continue
					}
					var last Event
					for e := range ch {
						last = e
					}
					cancel()
					count(last, &finished, &cancelled, &other)
				case 1: // closed while running: cancelled and released
					s, err := c.Add(req)
					if err != nil {
						errs <- err
						continue
					}
					s.Close()
				default: // cancelled directly, or left to finish
					s, err := c.Add(req)
					if err != nil {
						errs <- err
						continue
					}
					if i%2 == 0 {
						if err := s.Cancel(); err != nil && !isStatus(err, StatusState) {
							errs <- err
						}
					}
					var last Event
					for e := range s.Events() {
						last = e
					}
					s.Close()
					count(last, &finished, &cancelled, &other)
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for c.NumUnfinished() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	stopRun()
	<-runDone
	if c.NumUnfinished() != 0 || other.Load() != 0 || finished.Load() == 0 {
		t.Fatalf("unfinished %d, finished %d, cancelled %d, other %d", c.NumUnfinished(),
			finished.Load(), cancelled.Load(), other.Load())
	}
	t.Logf("finished %d, cancelled %d", finished.Load(), cancelled.Load())
}

func count(last Event, finished, cancelled, other *atomic.Int32) {
	switch last.Finish {
	case FinishLength:
		finished.Add(1)
	case FinishCancelled:
		cancelled.Add(1)
	default:
		other.Add(1)
	}
}

func isStatus(err error, s Status) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == s
}
