// kvtier-openai-server: an OpenAI-compatible HTTP service over the kvtier Go binding.
// POST /v1/chat/completions and /v1/completions (streamed as server-sent events or not),
// GET /v1/models, /metrics (Prometheus text) and /health. One goroutine steps the model
// (Context.Run); each request adds its sequences and reads their events, and a client that
// disconnects has its sequences cancelled at once.
//
// Usage: kvtier-openai-server [flags]
//
//	--model PATH        checkpoint directory or .gguf file (default: the demo model,
//	                    $KVTIER_DEMO_MODEL or /usr/share/kvtier/models/demo)
//	--model-name NAME   the model's id in requests (default: PATH's base name)
//	--listen ADDR       host:port to serve on; port 0 picks a free one (default 127.0.0.1:8000)
//	--backend, --threads, --gpu-kv-bytes, --host-kv-bytes, --disk-kv-bytes, --disk-path,
//	--remote-kv-url, --max-running, --max-waiting   the context options of the same names
//	--option KEY=VALUE  any other context option of kvtier.h (repeatable)
//
// It prints "listening on http://HOST:PORT" once it serves, and stops on SIGINT or SIGTERM
// after the requests in flight end.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	kvtier "github.com/kvtier/kvtier/bindings/go"
)

// optionList collects repeated --option KEY=VALUE flags.
type optionList map[string]string

func (o optionList) String() string { return fmt.Sprint(map[string]string(o)) }

func (o optionList) Set(text string) error {
	key, value, ok := strings.Cut(text, "=")
	if !ok || key == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", text)
	}
	o[key] = value
	return nil
}

type config struct {
	model, name, listen string
	options             optionList
}

func parseFlags(args []string) (*config, error) {
	fs := flag.NewFlagSet("kvtier-openai-server", flag.ContinueOnError)
	defaultModel := os.Getenv("KVTIER_DEMO_MODEL")
	if defaultModel == "" {
		defaultModel = "/usr/share/kvtier/models/demo"
	}
	c := &config{options: optionList{}}
	fs.StringVar(&c.model, "model", defaultModel, "checkpoint directory or .gguf file")
	fs.StringVar(&c.name, "model-name", "", "the model's id in requests (default: the model path's base name)")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8000", "host:port to serve on; port 0 picks a free port")
	for _, key := range []string{"backend", "threads", "gpu_kv_bytes", "host_kv_bytes", "disk_kv_bytes", "disk_path",
		"remote_kv_url", "max_running", "max_waiting"} {
		key := key
		fs.Func(strings.ReplaceAll(key, "_", "-"), "context option "+key+" (kvtier.h)", func(v string) error {
			c.options[key] = v
			return nil
		})
	}
	fs.Var(c.options, "option", "any context option of kvtier.h as KEY=VALUE (repeatable)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if c.name == "" {
		c.name = strings.TrimSuffix(filepath.Base(filepath.Clean(c.model)), ".gguf")
	}
	return c, nil
}

func main() {
	c, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "kvtier-openai-server:", err)
		os.Exit(2)
	}
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "kvtier-openai-server:", err)
		os.Exit(1)
	}
}

func run(c *config) error {
	kvtier.SetLogFunc(func(level kvtier.LogLevel, message string) {
		fmt.Fprintf(os.Stderr, "kvtier: %s: %s\n", strings.ToLower(level.String()), message)
	}, kvtier.LevelWarn)
	defer kvtier.SetLogFunc(nil, kvtier.LevelWarn)
	model, err := kvtier.LoadModel(c.model)
	if err != nil {
		return err
	}
	defer model.Close()
	if !model.HasTokenizer() {
		return fmt.Errorf("%s has no tokenizer: an OpenAI-style service needs text in and out", c.model)
	}
	engine, err := kvtier.NewContext(model, &kvtier.Options{Strings: c.options})
	if err != nil {
		return err
	}
	defer engine.Close()
	s, err := newServer(model, engine, c.name)
	if err != nil {
		return err
	}

	listener, err := net.Listen("tcp", c.listen)
	if err != nil {
		return err
	}
	stepping, stopStepping := context.WithCancel(context.Background())
	stepped := make(chan struct{})
	go func() {
		defer close(stepped)
		if err := engine.Run(stepping); err != nil && !errors.Is(err, context.Canceled) {
			s.stepFailed.Store(err)
			fmt.Fprintln(os.Stderr, "kvtier-openai-server: stepping failed:", err)
		}
	}()
	httpServer := &http.Server{Handler: s.routes(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- httpServer.Serve(listener) }()
	fmt.Printf("listening on http://%s (model %s)\n", listener.Addr(), c.name)

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	select {
	case sig := <-signals:
		fmt.Fprintf(os.Stderr, "kvtier-openai-server: %v: stopping\n", sig)
	case err := <-served:
		stopStepping()
		return err
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = httpServer.Shutdown(shutdown)
	stopStepping()
	<-stepped
	return err
}
