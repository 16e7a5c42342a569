// Package agenttest is a scripted model for the tests of the agent loop:
// an HTTP server that speaks the chat-completions wire protocol of an
// OpenAI-compatible endpoint (JSON answers, and server-sent events with
// the usage in the last chunk when a request streams) and answers each
// request with the next reply of a script. Replies can also be faults: an
// error status, a body that is not the protocol, a slow answer, a stream
// cut short.
package agenttest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Request is what the model was asked.
type Request struct {
	Model    string
	Messages []Message
	// Tools are the names of the tools offered.
	Tools []string
	// Stream and IncludeUsage are the request's stream flags.
	Stream, IncludeUsage bool
	// Auth is the Authorization header.
	Auth string
	// Body is the request as sent.
	Body []byte
}

// Turn says where the conversation of a request stands: how many answers
// of the model it holds, and the tool results that came after the last
// one, by call id. A script picks its reply by the first and checks the
// second.
func (r Request) Turn() (answers int, results map[string]string) {
	results = map[string]string{}
	for _, m := range r.Messages {
		switch m.Role {
		case "assistant":
			answers++
			results = map[string]string{}
		case "tool":
			results[m.ToolCallID] = m.Content
		}
	}
	return answers, results
}

// Message is one message of a request.
type Message struct {
	Role string
	// Content is the text, the text parts joined for a message of parts.
	Content string
	// Images counts the image parts.
	Images     int
	ToolCallID string
	ToolCalls  []ToolCall
}

// ToolCall is one call of a tool.
type ToolCall struct {
	ID, Name, Arguments string
}

// Usage is what a reply reports it cost.
type Usage struct {
	Prompt, Completion, Cached int
}

// Reply is one answer of the script.
type Reply struct {
	Content   string
	ToolCalls []ToolCall
	// Usage is reported as given; when zero, it is estimated from the
	// request and the reply (about four bytes a token, the prefix shared
	// with the last request counted as cached).
	Usage Usage
	// Status, when set, answers with that HTTP status and an error body.
	Status int
	// Garbage, when set, is written as the whole body, status 200.
	Garbage string
	// Delay waits this long before answering (or until the client goes).
	Delay time.Duration
	// CutAfter, when set, ends a stream's connection after that many
	// chunks, with no [DONE].
	CutAfter int
	// StallAfter, when set, stops sending a stream after that many chunks
	// and holds the connection open until the client goes.
	StallAfter int
}

// Script gives the reply to the n-th request (from 0).
type Script func(n int, req Request) Reply

// Model is a scripted model served over HTTP.
type Model struct {
	// URL is the endpoint's base URL, ending in /v1.
	URL string
	key string

	script Script
	srv    *httptest.Server

	mu       sync.Mutex
	requests []Request
	lastBody []byte
}

// New serves script until the test ends. Requests must carry
// "Authorization: Bearer KEY" when key is set.
func New(t testing.TB, key string, script Script) *Model {
	m := &Model{key: key, script: script}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	m.URL = m.srv.URL + "/v1"
	t.Cleanup(m.srv.Close)
	return m
}

// Requests returns the requests seen so far.
func (m *Model) Requests() []Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Request(nil), m.requests...)
}

// wireRequest is the part of a chat-completions request the server reads.
type wireRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role       string          `json:"role"`
		Content    json.RawMessage `json:"content"`
		ToolCallID string          `json:"tool_call_id"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Type     string `json:"type"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
	Stream        bool `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func (m *Model) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		apiError(w, http.StatusNotFound, "no route "+r.Method+" "+r.URL.Path)
		return
	}
	if m.key != "" && r.Header.Get("Authorization") != "Bearer "+m.key {
		apiError(w, http.StatusUnauthorized, "Incorrect API key provided")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<20))
	if err != nil {
		apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	var wr wireRequest
	if err := json.Unmarshal(body, &wr); err != nil {
		apiError(w, http.StatusBadRequest, "the body is not JSON: "+err.Error())
		return
	}
	req := Request{Model: wr.Model, Stream: wr.Stream, IncludeUsage: wr.StreamOptions.IncludeUsage,
		Auth: r.Header.Get("Authorization"), Body: body}
	for _, t := range wr.Tools {
		req.Tools = append(req.Tools, t.Function.Name)
	}
	for _, wm := range wr.Messages {
		msg := Message{Role: wm.Role, ToolCallID: wm.ToolCallID}
		msg.Content, msg.Images = content(wm.Content)
		for _, tc := range wm.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{tc.ID, tc.Function.Name, tc.Function.Arguments})
		}
		req.Messages = append(req.Messages, msg)
	}
	m.mu.Lock()
	n := len(m.requests)
	m.requests = append(m.requests, req)
	prev := m.lastBody
	m.lastBody = body
	m.mu.Unlock()

	reply := m.script(n, req)
	if reply.Delay > 0 {
		select {
		case <-time.After(reply.Delay):
		case <-r.Context().Done():
			return
		}
	}
	switch {
	case reply.Status != 0:
		apiError(w, reply.Status, fmt.Sprintf("scripted failure %d", reply.Status))
		return
	case reply.Garbage != "":
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(reply.Garbage))
		return
	}
	if reply.Usage == (Usage{}) {
		reply.Usage = estimate(body, prev, reply)
	}
	id := fmt.Sprintf("chatcmpl-%d", n+1)
	if req.Stream {
		m.stream(w, r.Context().Done(), id, wr.Model, req.IncludeUsage, reply)
		return
	}
	finish := "stop"
	msg := map[string]any{"role": "assistant", "content": nil}
	if reply.Content != "" {
		msg["content"] = reply.Content
	}
	if len(reply.ToolCalls) > 0 {
		finish = "tool_calls"
		var calls []map[string]any
		for _, c := range reply.ToolCalls {
			calls = append(calls, map[string]any{"id": c.ID, "type": "function",
				"function": map[string]any{"name": c.Name, "arguments": c.Arguments}})
		}
		msg["tool_calls"] = calls
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "object": "chat.completion", "created": time.Now().Unix(),
		"model": wr.Model, "choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage": usage(reply.Usage)})
}

// stream writes a reply as server-sent events: the role, the content in
// pieces, each tool call's name and then its arguments in pieces, the
// finish reason, and the usage in a last chunk without choices.
func (m *Model) stream(w http.ResponseWriter, done <-chan struct{}, id, model string, withUsage bool, reply Reply) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	flusher, _ := w.(http.Flusher)
	sent := 0
	send := func(v any) bool {
		if reply.CutAfter > 0 && sent >= reply.CutAfter {
			return false
		}
		if reply.StallAfter > 0 && sent >= reply.StallAfter {
			<-done
			return false
		}
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
		sent++
		return true
	}
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": id, "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
	}
	if !send(chunk(map[string]any{"role": "assistant", "content": ""}, nil)) {
		return
	}
	for _, piece := range pieces(reply.Content, 7) {
		if !send(chunk(map[string]any{"content": piece}, nil)) {
			return
		}
	}
	for i, c := range reply.ToolCalls {
		first := map[string]any{"index": i, "id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": ""}}
		if !send(chunk(map[string]any{"tool_calls": []any{first}}, nil)) {
			return
		}
		for _, piece := range pieces(c.Arguments, 40) {
			if !send(chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": piece}}}}, nil)) {
				return
			}
		}
	}
	finish := "stop"
	if len(reply.ToolCalls) > 0 {
		finish = "tool_calls"
	}
	if !send(chunk(map[string]any{}, finish)) {
		return
	}
	if withUsage {
		if !send(map[string]any{"id": id, "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": model,
			"choices": []any{}, "usage": usage(reply.Usage)}) {
			return
		}
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if flusher != nil {
		flusher.Flush()
	}
}

// pieces splits s into parts of about n bytes, at character boundaries.
func pieces(s string, n int) []string {
	var out []string
	for len(s) > 0 {
		k := min(n, len(s))
		for k < len(s) && s[k]&0xC0 == 0x80 {
			k++
		}
		out = append(out, s[:k])
		s = s[k:]
	}
	return out
}

func usage(u Usage) map[string]any {
	return map[string]any{"prompt_tokens": u.Prompt, "completion_tokens": u.Completion, "total_tokens": u.Prompt + u.Completion,
		"prompt_tokens_details": map[string]any{"cached_tokens": u.Cached}}
}

// estimate makes up a plausible usage: four bytes a token, the prefix the
// request shares with the last one cached.
func estimate(body, prev []byte, reply Reply) Usage {
	shared := 0
	for shared < len(body) && shared < len(prev) && body[shared] == prev[shared] {
		shared++
	}
	out := len(reply.Content)
	for _, c := range reply.ToolCalls {
		out += len(c.Name) + len(c.Arguments) + 8
	}
	return Usage{Prompt: len(body)/4 + 1, Completion: out/4 + 1, Cached: shared / 4 / 64 * 64}
}

// content reads a message's content: a string, or parts.
func content(raw json.RawMessage) (string, int) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", 0
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, 0
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return string(raw), 0
	}
	var texts []string
	images := 0
	for _, p := range parts {
		switch p.Type {
		case "text":
			texts = append(texts, p.Text)
		case "image_url":
			images++
		}
	}
	return strings.Join(texts, "\n"), images
}

func apiError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error"}})
}
