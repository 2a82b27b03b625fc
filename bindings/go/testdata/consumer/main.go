// A program outside the kvtier repository that imports the binding by its module path:
// consumer.sh builds it in a fresh module whose go.mod only replaces that path with a
// local copy, and runs it. Usage: consumer MODEL_DIR
package main

import (
	"context"
	"fmt"
	"os"

	kvtier "github.com/kvtier/kvtier/bindings/go"
)

func main() {
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
	if n := kvtier.LiveHandles(); n != 0 {
		fmt.Fprintln(os.Stderr, "consumer:", n, "native handles leaked")
		os.Exit(1)
	}
}

func run(modelDir string) error {
	model, err := kvtier.LoadModel(modelDir)
	if err != nil {
		return err
	}
	defer model.Close()
	engine, err := kvtier.NewContext(model, &kvtier.Options{Backend: "cpu"})
	if err != nil {
		return err
	}
	defer engine.Close()
	tokens, finish, err := engine.Generate(context.Background(),
		kvtier.Request{Prompt: []int32{1, 2, 3}, MaxNewTokens: 6, IgnoreEOS: true})
	if err != nil {
		return err
	}
	if len(tokens) != 6 || finish != kvtier.FinishLength {
		return fmt.Errorf("generated %d tokens (%v), want 6 (length)", len(tokens), finish)
	}
	fmt.Println("kvtier", kvtier.Version(), "generated", tokens)
	return nil
}
