// Tests of the service over the test model with a byte tokenizer ($KVTIER_TEST_TEXT_MODEL):
// request parsing and OpenAI-shaped errors, and answers equal to the binding's own run of
// the same request. tests/openai/oracle runs the official client against it on the demo model.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	kvtier "github.com/kvtier/kvtier/bindings/go"
)

// startServer serves the text model on a loopback httptest server.
func startServer(t *testing.T) (*server, *httptest.Server) {
	t.Helper()
	model, err := kvtier.LoadModel(os.Getenv("KVTIER_TEST_TEXT_MODEL"))
	if err != nil {
		t.Fatal(err)
	}
	engine, err := kvtier.NewContext(model, &kvtier.Options{Backend: "cpu", Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	s, err := newServer(model, engine, "tiny")
	if err != nil {
		t.Fatal(err)
	}
	stepping, stop := context.WithCancel(context.Background())
	stepped := make(chan struct{})
	go func() {
		defer close(stepped)
		engine.Run(stepping)
	}()
	h := httptest.NewServer(s.routes())
	t.Cleanup(func() {
		h.Close()
		stop()
		<-stepped
		engine.Close()
		model.Close()
		if n := kvtier.LiveHandles(); n != 0 {
			t.Errorf("%d native handles left", n)
		}
	})
	return s, h
}

func post(t *testing.T, url, body string) (int, map[string]interface{}) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]interface{}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("%s: the body is not JSON: %v", body, err)
	}
	return resp.StatusCode, out
}

func TestErrorsAreOpenAIShaped(t *testing.T) {
	_, h := startServer(t)
	chat := h.URL + "/v1/chat/completions"
	for _, c := range []struct {
		url, body string
		status    int
		param     interface{}
	}{
		{chat, `{"model": "tiny", "messages": [`, 400, nil},
		{chat, `"a string"`, 400, nil},
		{chat, `{"model": "tiny"}`, 400, "messages"},
		{chat, `{"model": "other", "messages": [{"role": "user", "content": "x"}]}`, 404, "model"},
		{chat, `{"model": "tiny", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}`, 400, "messages[0].content"},
		{chat, `{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "top_p": 1.5}`, 400, "top_p"},
		{chat, `{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": "many"}`, 400, "max_tokens"},
		{chat, `{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": true}}`, 400, "stream_options"},
		{chat, `{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "logit_bias": {"99999": 1}}`, 400, "logit_bias"},
		{h.URL + "/v1/completions", `{"model": "tiny", "prompt": "x", "echo": true}`, 400, "echo"},
		{h.URL + "/v1/completions", `{"model": "tiny", "prompt": [[]]}`, 400, "prompt"},
		{h.URL + "/v1/completions", `{"model": "tiny", "prompt": "x", "max_tokens": -1}`, 400, "max_tokens"},
		{h.URL + "/v1/embeddings", `{}`, 404, nil},
	} {
		status, body := post(t, c.url, c.body)
		e, _ := body["error"].(map[string]interface{})
		if status != c.status || e == nil || e["param"] != c.param || e["message"] == "" || e["type"] == nil {
			t.Errorf("%s %s: %d %v, want %d with param %v", c.url, c.body, status, body, c.status, c.param)
		}
		if _, ok := e["code"]; !ok {
			t.Errorf("%s: no code field in %v", c.body, e)
		}
	}
	resp, err := http.Get(chat)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" {
		t.Errorf("GET %s: %d, Allow %q", chat, resp.StatusCode, resp.Header.Get("Allow"))
	}
}

// The service's completion is the binding's run of the same request, streamed or not.
func TestCompletionsAreTheLibrarysRun(t *testing.T) {
	s, h := startServer(t)
	want, _, err := s.engine.Generate(context.Background(), kvtier.Request{PromptText: "Hello", MaxNewTokens: 6,
		Greedy: true, LogitBias: map[int32]float32{256: -100, 257: -100}})
	if err != nil {
		t.Fatal(err)
	}
	text, err := s.tokens.model.Detokenize(want, false)
	if err != nil {
		t.Fatal(err)
	}
	// logit_bias bans the byte model's special tokens: it runs its 6 tokens.
	body := `{"model": "tiny", "prompt": "Hello", "max_tokens": 6, "temperature": 0, "logit_bias": {"256": -100, "257": -100}`
	status, out := post(t, h.URL+"/v1/completions", body+`}`)
	if status != 200 {
		t.Fatalf("%d %v", status, out)
	}
	choice := out["choices"].([]interface{})[0].(map[string]interface{})
	usage := out["usage"].(map[string]interface{})
	if choice["text"] != text || choice["finish_reason"] != "length" || usage["completion_tokens"] != 6.0 ||
		usage["prompt_tokens"] != 6.0 { // BOS and five bytes
		t.Errorf("got %v, want text %q", out, text)
	}

	resp, err := http.Post(h.URL+"/v1/completions", "application/json",
		strings.NewReader(body+`, "stream": true, "stream_options": {"include_usage": true}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	var streamed strings.Builder
	var events []string
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		if line := lines.Text(); strings.HasPrefix(line, "data: ") {
			events = append(events, strings.TrimPrefix(line, "data: "))
		}
	}
	if len(events) < 3 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("events %v", events)
	}
	var last completion
	for _, e := range events[:len(events)-1] {
		var chunk completion
		if err := json.Unmarshal([]byte(e), &chunk); err != nil {
			t.Fatal(err)
		}
		for _, c := range chunk.Choices {
			streamed.WriteString(c.Text)
		}
		last = chunk
	}
	if streamed.String() != text || last.Usage == nil || last.Usage.CompletionTokens != 6 {
		t.Errorf("streamed %q (usage %+v), want %q", streamed.String(), last.Usage, text)
	}
}

// A chat request on a model without a chat template is formatted as ChatML; the usage counts
// that prompt.
func TestChatUsageCountsTheFormattedPrompt(t *testing.T) {
	s, h := startServer(t)
	status, out := post(t, h.URL+"/v1/chat/completions",
		`{"model": "tiny", "messages": [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi"}]}], "max_tokens": 3}`)
	if status != 200 {
		t.Fatalf("%d %v", status, out)
	}
	chatml := "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
	ids, err := s.tokens.model.Tokenize(chatml, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := out["usage"].(map[string]interface{})["prompt_tokens"]; got != float64(len(ids)) {
		t.Errorf("prompt_tokens %v, want %d", got, len(ids))
	}
}
