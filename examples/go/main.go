// A small service built on the kvtier Go binding: one goroutine drives the engine
// (Context.Run), request goroutines each stream a sequence's text (token ids for a model
// without a tokenizer) as it is produced, one request is cancelled by its deadline, then the
// statistics are printed.
// Usage: kvtier-example-go [MODEL_DIR]
// Without MODEL_DIR it uses the demo model of package kvtier-demo-model
// (/usr/share/kvtier/models/demo, or $KVTIER_DEMO_MODEL).
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	kvtier "github.com/kvtier/kvtier/bindings/go"
)

func main() {
	if len(os.Args) > 2 {
		fmt.Fprintln(os.Stderr, "usage: kvtier-example-go [MODEL_DIR]")
		os.Exit(2)
	}
	modelDir := os.Getenv("KVTIER_DEMO_MODEL")
	if modelDir == "" {
		modelDir = "/usr/share/kvtier/models/demo"
	}
	if len(os.Args) == 2 {
		modelDir = os.Args[1]
	}
	if err := run(modelDir); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	if kvtier.LiveHandles() != 0 {
		fmt.Fprintln(os.Stderr, "native handles leaked")
		os.Exit(1)
	}
}

func run(modelDir string) error {
	fmt.Println("kvtier", kvtier.Version())
	model, err := kvtier.LoadModel(modelDir)
	if err != nil {
		return err
	}
	defer model.Close()
	engine, err := kvtier.NewContext(model, &kvtier.Options{Backend: "cpu",
		Strings: map[string]string{"gpu_kv_bytes": "4MiB"}})
	if err != nil {
		return err
	}
	defer engine.Close()

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go engine.Run(ctx)

	prompts := []string{"The meaning of life is", "A computer is", "Never trust a man who", "Love is"}
	text := model.HasTokenizer()
	var wg sync.WaitGroup
	for client := 0; client < 4; client++ {
		wg.Add(1)
		go func(client int) {
			defer wg.Done()
			reqCtx := context.Background()
			if client == 3 { // an impatient client: cancelled by its deadline
				var cancel context.CancelFunc
				reqCtx, cancel = context.WithTimeout(reqCtx, time.Millisecond)
				defer cancel()
			}
			req := kvtier.Request{MaxNewTokens: 24, Temperature: 0.7, Seed: int64(client)}
			if text {
				req.PromptText = prompts[client]
			} else { // a random-weight model: token ids, and no end of text to wait for
				req.Prompt = []int32{int32(1 + client), int32(20 + client), 30, 40}
				req.MaxNewTokens, req.IgnoreEOS = 10, true
			}
			events, err := engine.Stream(reqCtx, req)
			if err != nil {
				fmt.Printf("request %d refused: %v\n", client, err)
				return
			}
			var line strings.Builder
			if text {
				line.WriteString(req.PromptText)
			}
			for e := range events {
				if e.HasToken() && !text {
					fmt.Printf("request %d token %d\n", client, e.Token)
					fmt.Fprintf(&line, " %d", e.Token)
				}
				line.WriteString(e.Text)
				if e.Final() {
					fmt.Printf("request %d done (%v): %q\n", client, e.Finish, line.String())
				}
			}
		}(client)
	}
	wg.Wait()
	stats, err := engine.StatsJSON()
	if err != nil {
		return err
	}
	fmt.Println("stats", stats)
	generated, _ := engine.Stat("generated_tokens")
	fmt.Println("generated_tokens", generated)
	return nil
}
