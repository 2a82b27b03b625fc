// Tests of logging, progress and cancellation, Prometheus metrics, prefix pinning, sequence
// errors and generation_config.json defaults through the Go binding.
package kvtier

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

func TestLogFuncHearsTheLibrary(t *testing.T) {
	defer checkNoLeaks(t)
	var mu sync.Mutex
	var lines []string
	var levels []LogLevel
	if err := SetLogFunc(func(l LogLevel, m string) {
		mu.Lock()
		defer mu.Unlock()
		levels = append(levels, l)
		lines = append(lines, m)
	}, LevelInfo); err != nil {
		t.Fatal(err)
	}
	m, err := LoadModel(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c, err := NewContext(m, &Options{Backend: "cpu", Threads: 2, HostKVBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := SetLogFunc(nil, LevelDebug); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	found := -1
	for i, line := range lines {
		if strings.Contains(line, "host tier disabled") && strings.Contains(line, "host_kv_bytes 100") {
			found = i
		}
	}
	if found < 0 || levels[found] != LevelWarn {
		t.Fatalf("no WARN line about the host tier in %q (levels %v)", lines, levels)
	}
	n := len(lines)
	mu.Unlock()
	// Off: never called again.
	c2, err := NewContext(m, &Options{Backend: "cpu", Threads: 2, HostKVBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	c2.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(lines) != n {
		t.Fatalf("called after SetLogFunc(nil): %q", lines[n:])
	}
	if LevelWarn.String() != "WARN" || levelToC(LevelError) != 3 || levelFromC(0) != LevelDebug {
		t.Fatal("level mapping")
	}
}

type report struct {
	stage       string
	done, total int64
}

// stagesOf checks that each stage runs from 0 to its total, in this order.
func stagesOf(t *testing.T, reports []report, want ...string) {
	t.Helper()
	var got []string
	for i, r := range reports {
		if i == 0 || reports[i-1].stage != r.stage {
			got = append(got, r.stage)
			if r.done != 0 {
				t.Fatalf("stage %s starts at %d", r.stage, r.done)
			}
		} else if r.done < reports[i-1].done {
			t.Fatalf("stage %s went back: %v", r.stage, reports)
		}
		if i == len(reports)-1 || reports[i+1].stage != r.stage {
			if r.done != r.total {
				t.Fatalf("stage %s ends at %d of %d", r.stage, r.done, r.total)
			}
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("stages %v, want %v", got, want)
	}
}

func TestProgressAndCancellation(t *testing.T) {
	defer checkNoLeaks(t)
	var reports []report
	record := func(stage string, done, total int64) bool {
		reports = append(reports, report{stage, done, total})
		return true
	}
	m, err := LoadModelWithProgress(modelDir, record)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	stagesOf(t, reports, "files", "tensors", "tokenizer")

	_, err = LoadModelWithProgress(modelDir, func(stage string, done, total int64) bool { return stage != "tensors" })
	wantError(t, err, StatusCancelled, "tensors")

	reports = nil
	c, err := NewContext(m, &Options{Backend: "cpu", Threads: 2, Progress: record})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	stagesOf(t, reports, "weights", "kv_pools", "warmup")
	_, err = NewContext(m, &Options{Backend: "cpu", Threads: 2,
		Progress: func(stage string, done, total int64) bool { return done == 0 }})
	wantError(t, err, StatusCancelled, "weights")

	// A panic in the progress function cancels the call and is raised in the caller.
	func() {
		defer func() {
			if r := recover(); r != "stop here" {
				t.Fatalf("recovered %v", r)
			}
		}()
		LoadModelWithProgress(modelDir, func(string, int64, int64) bool { panic("stop here") })
		t.Fatal("no panic")
	}()
}

func TestMetricsText(t *testing.T) {
	defer checkNoLeaks(t)
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
	for i := 0; i < 2; i++ {
		if _, _, err := c.Generate(context.Background(), Request{Prompt: []int32{5, 6, 7}, MaxNewTokens: 4, IgnoreEOS: true}); err != nil {
			t.Fatal(err)
		}
	}
	text, err := c.MetricsText()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# TYPE kvtier_generated_tokens_total counter\nkvtier_generated_tokens_total 8\n",
		"kvtier_time_to_first_token_seconds_count 2\n",
		"kvtier_inter_token_latency_seconds_count 6\n",
		"kvtier_tier_used_bytes{tier=\"gpu\"} ",
	} {
		if !strings.Contains(text, want) {
			t.Fatalf("metrics lack %q:\n%s", want, text)
		}
	}
}

// The text grows between the calls, by more than the slack of a buffer sized by the call
// before: copied once more each time, it comes back whole, never cut short.
func TestCopyGrowingTextCopiesAgainWhileTheTextGrows(t *testing.T) {
	var text string
	calls := 0
	got, err := copyGrowingText(func(buf []byte) (int, error) {
		calls++
		text = strings.Repeat(string(rune('a'+calls)), 1000*calls)
		if len(buf) > 0 { // as the C API copies
			buf[copy(buf[:len(buf)-1], text)] = 0
		}
		return len(text), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got != text {
		t.Fatalf("got %d bytes (%.10q...) after %d calls, want the last call's %d (%.10q...)", len(got), got, calls, len(text), text)
	}
	wantErr := errors.New("failed")
	if _, err := copyGrowingText(func([]byte) (int, error) { return 0, wantErr }); err != wantErr {
		t.Fatalf("got error %v, want %v", err, wantErr)
	}
}

func TestPinPrefixAndSequenceError(t *testing.T) {
	defer checkNoLeaks(t)
	m, err := LoadModel(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c, err := NewContext(m, &Options{Backend: "cpu", Threads: 2, BlockTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	prompt := []int32{3, 4, 5, 6, 7, 8, 9, 10, 11}
	s, err := c.Add(Request{Prompt: prompt, MaxNewTokens: 2, IgnoreEOS: true, PinPrefix: true})
	if err != nil {
		t.Fatal(err)
	}
	for !s.Finished() {
		if _, err := c.Step(); err != nil {
			t.Fatal(err)
		}
	}
	if msg, err := s.ErrorMessage(); err != nil || msg != "" {
		t.Fatalf("error message %q, %v", msg, err)
	}
	s.Close()
	if pinned, _ := c.Stat("pinned_blocks"); pinned != 2 { // two full blocks of 4 tokens
		t.Fatalf("pinned_blocks %d", pinned)
	}
	if err := c.UnpinPrefixes(); err != nil {
		t.Fatal(err)
	}
	if pinned, _ := c.Stat("pinned_blocks"); pinned != 0 {
		t.Fatalf("pinned_blocks %d after UnpinPrefixes", pinned)
	}
	_, err = c.SequenceError(424242)
	wantError(t, err, StatusNotFound, "")
}

// withGenerationConfig is the test model's directory with its own generation_config.json.
func withGenerationConfig(t *testing.T, json string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"config.json", "model.safetensors"} {
		if err := os.Symlink(filepath.Join(modelDir, f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(json), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func generateOn(t *testing.T, dir string, req Request) []int32 {
	t.Helper()
	m, err := LoadModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c, err := NewContext(m, cpu())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	toks, _, err := c.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return toks
}

func TestGenerationConfigDefaults(t *testing.T) {
	defer checkNoLeaks(t)
	dir := withGenerationConfig(t, `{"do_sample": true, "temperature": 1.3, "top_k": 20, "max_new_tokens": 7}`)
	m, err := LoadModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	info, err := m.InfoJSON()
	m.Close()
	if err != nil || !strings.Contains(info, `"temperature":1.3`) || !strings.Contains(info, `"max_new_tokens":7`) {
		t.Fatalf("info %s, %v", info, err)
	}
	prompt := []int32{9, 8, 7, 6}
	sampled := generateOn(t, dir, Request{Prompt: prompt, Seed: 99, IgnoreEOS: true})
	explicit := generateOn(t, modelDir, Request{Prompt: prompt, Seed: 99, IgnoreEOS: true, Temperature: 1.3, TopK: 20,
		MaxNewTokens: 7})
	if len(sampled) != 7 || !reflect.DeepEqual(sampled, explicit) {
		t.Fatalf("defaults gave %v, explicit %v", sampled, explicit)
	}
	greedy := generateOn(t, dir, Request{Prompt: prompt, Greedy: true, MaxNewTokens: 7, IgnoreEOS: true})
	plain := generateOn(t, modelDir, Request{Prompt: prompt, MaxNewTokens: 7, IgnoreEOS: true})
	if !reflect.DeepEqual(greedy, plain) {
		t.Fatalf("Greedy gave %v, the plain model %v", greedy, plain)
	}
	_, err = LoadModel(withGenerationConfig(t, `{"top_k": "many"}`))
	wantError(t, err, StatusInvalidArgument, "top_k")
	var e *Error
	if !errors.As(err, &e) {
		t.Fatal(err)
	}
}
