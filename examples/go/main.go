// A small service built on the kvtier Go binding: one goroutine drives the engine
// (Context.Run), request goroutines each stream a sequence's tokens as they are produced,
// one request is cancelled by its deadline, then the statistics are printed.
// Usage: kvtier-example-go MODEL_DIR
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
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: kvtier-example-go MODEL_DIR")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
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
			events, err := engine.Stream(reqCtx, kvtier.Request{
				Prompt: []int32{int32(1 + client), int32(20 + client), 30, 40}, MaxNewTokens: 10,
				Temperature: 0.7, Seed: int64(client), IgnoreEOS: true})
			if err != nil {
				fmt.Printf("request %d refused: %v\n", client, err)
				return
			}
			var line strings.Builder
			for e := range events {
				if e.HasToken() {
					fmt.Printf("request %d token %d\n", client, e.Token)
					fmt.Fprintf(&line, " %d", e.Token)
				}
				if e.Final() {
					fmt.Printf("request %d done (%v):%s\n", client, e.Finish, line.String())
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
