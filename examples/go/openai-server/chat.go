// POST /v1/chat/completions: the request's messages in the model's chat format, n choices,
// streamed as chat.completion.chunk events or answered as one chat.completion.

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"

	kvtier "github.com/kvtier/kvtier/bindings/go"
)

var (
	chatParams = knownParams("messages", "max_completion_tokens", "logprobs", "top_logprobs", "response_format",
		"parallel_tool_calls")
	chatUnsupported = map[string]string{
		"tools":              "tool calls are not implemented",
		"tool_choice":        "tool calls are not implemented",
		"functions":          "function calls are not implemented",
		"function_call":      "function calls are not implemented",
		"audio":              "the model produces text only",
		"modalities":         "the model produces text only",
		"prediction":         "predicted outputs are not implemented",
		"web_search_options": "there is no web search",
	}
)

type chatMessage struct {
	Role    string  `json:"role"`
	Content string  `json:"content"`
	Refusal *string `json:"refusal"`
}

type chatChoice struct {
	Index        int           `json:"index"`
	Message      chatMessage   `json:"message"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason string        `json:"finish_reason"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func newUsage(prompt, completion int) *usage {
	return &usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
}

type chatCompletion struct {
	responseHeader
	Choices []chatChoice `json:"choices"`
	Usage   *usage       `json:"usage"`
}

type chatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type chatChunkChoice struct {
	Index        int           `json:"index"`
	Delta        chatDelta     `json:"delta"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

type chatChunk struct {
	responseHeader
	Choices []chatChunkChoice `json:"choices"`
	Usage   *usage            `json:"usage,omitempty"`
}

// readMessages reads messages: roles system (or developer), user and assistant, each with
// text content (a string, or text parts).
func readMessages(f fields) ([]kvtier.ChatMessage, *apiError) {
	if !f.has("messages") {
		return nil, invalid("messages", "Missing required parameter: 'messages'.")
	}
	var raw []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := f.get("messages", &raw); err != nil {
		return nil, err
	}
	if len(raw) == 0 {
		return nil, invalid("messages", "Invalid 'messages': empty array. Expected an array with minimum length 1.")
	}
	out := make([]kvtier.ChatMessage, len(raw))
	for i, m := range raw {
		param := "messages[" + itoa(i) + "]"
		switch m.Role {
		case "system", "user", "assistant":
		case "developer":
			m.Role = "system"
		case "tool", "function":
			return nil, invalid(param+".role", "Invalid '%s.role': '%s' messages are not supported (no tool calls).", param, m.Role)
		case "":
			return nil, invalid(param+".role", "Missing required parameter: '%s.role'.", param)
		default:
			return nil, invalid(param+".role", "Invalid value: '%s'. Supported values are: 'system', 'developer', 'user' and 'assistant'.", m.Role)
		}
		content, err := messageText(m.Content, param)
		if err != nil {
			return nil, err
		}
		out[i] = kvtier.ChatMessage{Role: m.Role, Content: content}
	}
	return out, nil
}

// messageText is a message's content: a string, or an array of {"type": "text", "text"} parts.
func messageText(raw json.RawMessage, param string) (string, *apiError) {
	var text string
	if err := json.Unmarshal(raw, &text); err == nil {
		return text, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", invalid(param+".content", "Invalid '%s.content': expected a string or an array of text parts.", param)
	}
	var b strings.Builder
	for j, part := range parts {
		if part.Type != "text" || part.Text == nil {
			return "", invalid(param+".content", "Invalid '%s.content[%d]': only parts of type 'text' are supported, got '%s'.", param, j, part.Type)
		}
		b.WriteString(*part.Text)
	}
	return b.String(), nil
}

func (s *server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	f, e := readFields(w, r)
	if e == nil {
		e = f.refuse(chatParams, chatUnsupported)
	}
	if e == nil {
		e = s.checkModel(f)
	}
	var messages []kvtier.ChatMessage
	if e == nil {
		messages, e = readMessages(f)
	}
	var g *generation
	if e == nil {
		g, e = s.readShared(f, s.contextTokens)
	}
	var logprobs bool
	top := 0
	if e == nil {
		e = f.get("logprobs", &logprobs)
	}
	if e == nil {
		e = f.get("top_logprobs", &top)
	}
	if e == nil && f.has("top_logprobs") && !logprobs {
		e = invalid("top_logprobs", "Invalid value for 'top_logprobs': 'logprobs' must be set to true when 'top_logprobs' is used.")
	}
	if e == nil && (top < 0 || top > 20) {
		e = invalid("top_logprobs", "Invalid 'top_logprobs': %d. It must be between 0 and 20.", top)
	}
	if e == nil {
		e = readResponseFormat(f, &g.req)
	}
	if e != nil {
		writeError(w, e)
		return
	}
	g.req.Chat = messages
	g.req.Logprobs, g.req.TopLogprobs = logprobs, top
	id, created := newID("chatcmpl-"), now()
	s.answer(w, r, []kvtier.Request{g.req}, "messages", g,
		func(ctx context.Context, stream *eventStream, c *choices) {
			s.streamChat(ctx, stream, c, g, id, created, top)
		},
		func(results []choiceResult, u *usage) interface{} {
			out := chatCompletion{responseHeader: s.header("chat.completion", id, created),
				Choices: make([]chatChoice, len(results)), Usage: u}
			for i := range results {
				choice := chatChoice{Index: i, Message: chatMessage{Role: "assistant", Content: results[i].text.String()},
					FinishReason: finishReason(results[i].finish)}
				if logprobs {
					choice.Logprobs = &chatLogprobs{Content: []chatLogprob{}}
					for _, t := range results[i].logprobs {
						choice.Logprobs.Content = append(choice.Logprobs.Content, s.tokens.chatLogprob(t.TokenLogprobs, top))
					}
				}
				out.Choices[i] = choice
			}
			return out
		})
}

// streamChat sends a first chunk with the assistant role for every choice, then a chunk per
// event with text or log-probabilities, and one with the finish reason as each choice ends.
func (s *server) streamChat(ctx context.Context, stream *eventStream, c *choices, g *generation, id string,
	created int64, top int) {
	chunk := func(choices ...chatChunkChoice) chatChunk {
		return chatChunk{responseHeader: s.header("chat.completion.chunk", id, created),
			Choices: choices}
	}
	empty := ""
	for i := range c.seqs {
		if !stream.send(chunk(chatChunkChoice{Index: i, Delta: chatDelta{Role: "assistant", Content: &empty}})) {
			return
		}
	}
	c.streamTo(ctx, stream, g.includeUsage, chunkShapes{
		piece: func(e choiceEvent, logged *kvtier.TokenLogprobs, _ int) interface{} {
			if e.Text == "" && logged == nil {
				return nil
			}
			text := e.Text
			choice := chatChunkChoice{Index: e.index, Delta: chatDelta{Content: &text}}
			if g.req.Logprobs {
				choice.Logprobs = &chatLogprobs{Content: []chatLogprob{}}
				if logged != nil {
					choice.Logprobs.Content = append(choice.Logprobs.Content, s.tokens.chatLogprob(logged, top))
				}
			}
			return chunk(choice)
		},
		finish: func(index int, reason string) interface{} {
			return chunk(chatChunkChoice{Index: index, FinishReason: &reason})
		},
		usage: func(u *usage) interface{} {
			last := chunk()
			last.Choices, last.Usage = []chatChunkChoice{}, u
			return last
		},
	})
}
