// Examples of the kvtier package: `go test` runs them and checks their output; pkg.go.dev
// and godoc show each beside the identifier it is named after.
package kvtier_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"reflect"
	"strings"

	kvtier "github.com/kvtier/kvtier/bindings/go"
)

// The checkpoint directories the examples load, from the environment (ctest sets both: a
// tiny random-weight Llama, and one with a byte-level tokenizer.json).
var (
	modelDir     = os.Getenv("KVTIER_TEST_MODEL")
	textModelDir = os.Getenv("KVTIER_TEST_TEXT_MODEL")
)

// Load a checkpoint, create a context with a 4 MiB device-tier KV budget on the CPU
// backend, and generate from token ids.
func Example() {
	model, err := kvtier.LoadModel(modelDir)
	if err != nil {
		log.Fatal(err)
	}
	defer model.Close()
	engine, err := kvtier.NewContext(model, &kvtier.Options{Backend: "cpu", GPUKVBytes: 4 << 20})
	if err != nil {
		log.Fatal(err)
	}
	defer engine.Close()

	tokens, finish, err := engine.Generate(context.Background(),
		kvtier.Request{Prompt: []int32{1, 2, 3}, MaxNewTokens: 8, IgnoreEOS: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(tokens), "tokens, finish:", finish)
	// Output: 8 tokens, finish: length
}

// One goroutine drives the context with Run; a request streams its events over a channel
// as they are produced. Cancelling the context.Context given to Stream cancels the
// sequence.
func ExampleContext_Stream() {
	model, err := kvtier.LoadModel(modelDir)
	if err != nil {
		log.Fatal(err)
	}
	defer model.Close()
	engine, err := kvtier.NewContext(model, &kvtier.Options{Backend: "cpu"})
	if err != nil {
		log.Fatal(err)
	}
	defer engine.Close()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go engine.Run(ctx)

	events, err := engine.Stream(ctx, kvtier.Request{Prompt: []int32{1, 2, 3}, MaxNewTokens: 5, IgnoreEOS: true})
	if err != nil {
		log.Fatal(err)
	}
	streamed := 0
	for e := range events {
		if e.HasToken() {
			streamed++
		}
		if e.Final() {
			fmt.Println(streamed, "tokens streamed, finish:", e.Finish)
		}
	}
	// Output: 5 tokens streamed, finish: length
}

// Generate steps the context itself until its sequence finishes, so it needs no Run
// goroutine. Sampling is reproducible: the same seed gives the same tokens.
func ExampleContext_Generate() {
	model, err := kvtier.LoadModel(modelDir)
	if err != nil {
		log.Fatal(err)
	}
	defer model.Close()
	engine, err := kvtier.NewContext(model, &kvtier.Options{Backend: "cpu"})
	if err != nil {
		log.Fatal(err)
	}
	defer engine.Close()

	req := kvtier.Request{Prompt: []int32{7, 8, 9}, MaxNewTokens: 12, Temperature: 0.8, TopP: 0.95, Seed: 42}
	first, _, err := engine.Generate(context.Background(), req)
	if err != nil {
		log.Fatal(err)
	}
	again, _, err := engine.Generate(context.Background(), req)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("same tokens for the same seed:", reflect.DeepEqual(first, again))
	// Output: same tokens for the same seed: true
}

// A sequence driven by hand: Add it, Step the context, Cancel it; the next step reports
// its final event, which closes Events().
func ExampleSequence_Cancel() {
	model, err := kvtier.LoadModel(modelDir)
	if err != nil {
		log.Fatal(err)
	}
	defer model.Close()
	engine, err := kvtier.NewContext(model, &kvtier.Options{Backend: "cpu"})
	if err != nil {
		log.Fatal(err)
	}
	defer engine.Close()

	seq, err := engine.Add(kvtier.Request{Prompt: []int32{1, 2, 3}, MaxNewTokens: 100, IgnoreEOS: true})
	if err != nil {
		log.Fatal(err)
	}
	defer seq.Close()
	for i := 0; i < 3; i++ {
		if _, err := engine.Step(); err != nil {
			log.Fatal(err)
		}
	}
	if err := seq.Cancel(); err != nil {
		log.Fatal(err)
	}
	for !seq.Finished() {
		if _, err := engine.Step(); err != nil {
			log.Fatal(err)
		}
	}
	tokens, _ := seq.Tokens()
	fmt.Println(seq.FinishReason(), "after", len(tokens), "tokens")
	// Output: cancelled after 3 tokens
}

// Text in and out with the checkpoint's tokenizer.json (here a byte-level one).
func ExampleModel_Tokenize() {
	model, err := kvtier.LoadModel(textModelDir)
	if err != nil {
		log.Fatal(err)
	}
	defer model.Close()

	ids, err := model.Tokenize("héllo", false)
	if err != nil {
		log.Fatal(err)
	}
	text, err := model.Detokenize(ids, false)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(ids), "ids for 6 bytes:", text)
	// Output: 6 ids for 6 bytes: héllo
}

// Statistics by their JSON name; StatsJSON returns them all.
func ExampleContext_Stat() {
	model, err := kvtier.LoadModel(modelDir)
	if err != nil {
		log.Fatal(err)
	}
	defer model.Close()
	engine, err := kvtier.NewContext(model, &kvtier.Options{Backend: "cpu"})
	if err != nil {
		log.Fatal(err)
	}
	defer engine.Close()
	if _, _, err := engine.Generate(context.Background(),
		kvtier.Request{Prompt: []int32{1, 2, 3}, MaxNewTokens: 4, IgnoreEOS: true}); err != nil {
		log.Fatal(err)
	}
	generated, err := engine.Stat("generated_tokens")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("generated_tokens:", generated)
	// Output: generated_tokens: 4
}

// Route the library's log messages to your logger (with Go 1.21+, slog.Level(level)
// converts the level). A host-tier budget too small for one KV block turns the tier off,
// and the library says so.
func ExampleSetLogFunc() {
	kvtier.SetLogFunc(func(level kvtier.LogLevel, message string) {
		fmt.Println(level, message[:len("host tier disabled")])
	}, kvtier.LevelWarn)
	defer kvtier.SetLogFunc(nil, kvtier.LevelWarn)
	model, err := kvtier.LoadModel(modelDir)
	if err != nil {
		log.Fatal(err)
	}
	defer model.Close()
	engine, err := kvtier.NewContext(model, &kvtier.Options{Backend: "cpu", HostKVBytes: 100})
	if err != nil {
		log.Fatal(err)
	}
	engine.Close()
	// Output: WARN host tier disabled
}

// Serve the statistics on /metrics: the text is in the Prometheus exposition format
// (http.HandleFunc("/metrics", ...) writing engine.MetricsText()).
func ExampleContext_MetricsText() {
	model, err := kvtier.LoadModel(modelDir)
	if err != nil {
		log.Fatal(err)
	}
	defer model.Close()
	engine, err := kvtier.NewContext(model, &kvtier.Options{Backend: "cpu"})
	if err != nil {
		log.Fatal(err)
	}
	defer engine.Close()
	engine.Generate(context.Background(), kvtier.Request{Prompt: []int32{1, 2, 3}, MaxNewTokens: 4, IgnoreEOS: true})
	text, err := engine.MetricsText()
	if err != nil {
		log.Fatal(err)
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "kvtier_generated_tokens_total") ||
			strings.HasPrefix(line, "kvtier_time_to_first_token_seconds_count") {
			fmt.Println(line)
		}
	}
	// Output:
	// kvtier_generated_tokens_total 4
	// kvtier_time_to_first_token_seconds_count 1
}
