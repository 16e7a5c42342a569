package agent

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/agent/agenttest"
	"github.com/airlock-sandbox/airlock/tools"
)

const testKey = "sk-test-5f0c1e9a7d3b4c2a8e6f"

// TestModelWire: streamed and plain answers, text and tool calls, come
// back whole with the usage the endpoint reported, and the key travels in
// the Authorization header.
func TestModelWire(t *testing.T) {
	args := `{"code": "import pandas as pd\nprint('é' * 50)", "language": "python"}`
	srv := agenttest.New(t, testKey, func(n int, req agenttest.Request) agenttest.Reply {
		if n%2 == 0 {
			return agenttest.Reply{ToolCalls: []agenttest.ToolCall{{ID: "call_a", Name: "run_code", Arguments: args},
				{ID: "call_b", Name: "list_files", Arguments: "{}"}}, Usage: agenttest.Usage{Prompt: 100, Completion: 20, Cached: 64}}
		}
		return agenttest.Reply{Content: "Done: the deck is in report.pptx. ünïcode ✓", Usage: agenttest.Usage{Prompt: 150, Completion: 12}}
	})
	for _, stream := range []bool{true, false} {
		m, err := newModel(ModelOptions{BaseURL: srv.URL, APIKey: testKey, Model: "scripted", Stream: stream})
		if err != nil {
			t.Fatal(err)
		}
		c := call{msgs: []Message{{Role: RoleSystem, Content: "sys"}, {Role: RoleUser, Content: "task"}}, specs: tools.Specs(tools.Env{})}
		got, err := m.complete(context.Background(), c)
		if err != nil {
			t.Fatalf("stream %v: %v", stream, err)
		}
		if len(got.ToolCalls) != 2 || got.ToolCalls[0] != (ToolCall{"call_a", "run_code", args}) || got.ToolCalls[1].Name != "list_files" ||
			got.Usage != (Usage{100, 20, 64}) || got.FinishReason != "tool_calls" {
			t.Errorf("stream %v: %+v", stream, got)
		}
		c.msgs = append(c.msgs, Message{Role: RoleAssistant, ToolCalls: got.ToolCalls},
			Message{Role: RoleTool, ToolCallID: "call_a", Content: "ok"}, Message{Role: RoleTool, ToolCallID: "call_b", Content: "files"})
		got, err = m.complete(context.Background(), c)
		if err != nil || got.Content != "Done: the deck is in report.pptx. ünïcode ✓" || got.Usage != (Usage{150, 12, 0}) || len(got.ToolCalls) != 0 {
			t.Errorf("stream %v: answer %+v, %v", stream, got, err)
		}
	}
	reqs := srv.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d requests", len(reqs))
	}
	for i, r := range reqs {
		if r.Auth != "Bearer "+testKey || r.Stream != (i < 2) || r.Stream != r.IncludeUsage || len(r.Tools) != 6 {
			t.Errorf("request %d: auth %q stream %v usage %v tools %v", i, r.Auth, r.Stream, r.IncludeUsage, r.Tools)
		}
	}
	if m := reqs[1].Messages; len(m) != 5 || m[2].Role != RoleAssistant || len(m[2].ToolCalls) != 2 || m[3].ToolCallID != "call_a" {
		t.Errorf("the second request's messages: %+v", m)
	}
}

// TestModelFailures: an endpoint that is down, refuses, is slow, stalls,
// cuts its stream or answers garbage fails with ErrModel and a message
// that says which; the key is in none of them.
func TestModelFailures(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String() + "/v1"
	ln.Close()
	var script atomic.Pointer[agenttest.Reply] // a handler of an earlier case may still be running
	srv := agenttest.New(t, testKey, func(n int, _ agenttest.Request) agenttest.Reply { return *script.Load() })
	cases := []struct {
		name   string
		url    string
		stream bool
		reply  agenttest.Reply
		want   string
	}{
		{"down", down, false, agenttest.Reply{}, "cannot be reached"},
		{"refused", srv.URL, false, agenttest.Reply{Status: 401}, "answered 401 Unauthorized: scripted failure 401"},
		{"overloaded", srv.URL, true, agenttest.Reply{Status: 503}, "answered 503 Service Unavailable: scripted failure 503 (after 1 retries)"},
		{"slow", srv.URL, false, agenttest.Reply{Delay: 5 * time.Second}, "did not answer within 300ms"},
		{"stalled", srv.URL, true, agenttest.Reply{Content: strings.Repeat("word ", 40), StallAfter: 3}, "stopped sending its answer (nothing for 300ms)"},
		{"garbage", srv.URL, false, agenttest.Reply{Garbage: "<html>hello</html>"}, "not a chat completion"},
		{"no choice", srv.URL, false, agenttest.Reply{Garbage: `{"id":"x","object":"chat.completion","choices":[]}`}, "no choice"},
		{"garbage stream", srv.URL, true, agenttest.Reply{Garbage: "data: {not json\n\n"}, "not a chat completion"},
		{"cut stream", srv.URL, true, agenttest.Reply{Content: strings.Repeat("word ", 40), CutAfter: 3}, "before the answer was complete"},
	}
	for _, c := range cases {
		script.Store(&c.reply)
		timeout := 300 * time.Millisecond
		if c.name == "down" || c.name == "overloaded" || c.name == "stalled" {
			timeout = 20 * time.Second // room for the retry's back-off
		}
		m, err := newModel(ModelOptions{BaseURL: c.url, APIKey: testKey, Model: "m", Stream: c.stream, Timeout: timeout,
			IdleTimeout: 300 * time.Millisecond, Retries: 1})
		if err != nil {
			t.Fatal(err)
		}
		_, err = m.complete(context.Background(), call{msgs: []Message{{Role: RoleUser, Content: "hi"}}})
		if !errors.Is(err, ErrModel) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), testKey) {
			t.Errorf("%s: %v; want ErrModel saying %q", c.name, err, c.want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	script.Store(&agenttest.Reply{Delay: 5 * time.Second})
	time.AfterFunc(200*time.Millisecond, cancel) // while the endpoint thinks
	m, _ := newModel(ModelOptions{BaseURL: srv.URL, APIKey: testKey, Model: "m"})
	if _, err := m.complete(ctx, call{msgs: []Message{{Role: RoleUser, Content: "hi"}}}); !errors.Is(err, context.Canceled) || errors.Is(err, ErrModel) {
		t.Errorf("a cancelled call: %v, want context.Canceled", err)
	}
}
