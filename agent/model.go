package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/tools"
)

// ModelOptions say which endpoint and model the loop talks to.
type ModelOptions struct {
	// BaseURL is the endpoint's base, e.g. http://127.0.0.1:8080/v1.
	BaseURL string
	// APIKey goes in the Authorization header, and nowhere else.
	APIKey string
	// Model is the model's name as the endpoint knows it.
	Model string
	// Stream asks for server-sent events (with the usage in the last
	// chunk) instead of one JSON answer.
	Stream bool
	// Timeout bounds one answer, from the request to its last byte;
	// default 5 minutes.
	Timeout time.Duration
	// IdleTimeout fails a stream that, once started, sends nothing for
	// this long; default 2 minutes.
	IdleTimeout time.Duration
	// Retries is how many times a request that failed before any answer
	// came (no connection, 429, 5xx) is sent again; default 2, negative
	// none. A request that got an answer is never sent again.
	Retries int
	// HTTPClient replaces the HTTP client, for tests.
	HTTPClient *http.Client
}

// ErrModel means the model endpoint failed: it cannot be reached, it
// refused, it was too slow, or its answer was not a chat completion.
var ErrModel = errors.New("the model endpoint failed")

// Usage is what one or more model calls cost in tokens, as the endpoint
// reported it.
type Usage struct {
	Prompt     int64 `json:"prompt"`
	Completion int64 `json:"completion"`
	// Cached is the part of Prompt the endpoint served from its cache.
	Cached int64 `json:"cached"`
}

// Total is prompt and completion tokens together.
func (u Usage) Total() int64 { return u.Prompt + u.Completion }

func (u *Usage) add(v Usage) {
	u.Prompt += v.Prompt
	u.Completion += v.Completion
	u.Cached += v.Cached
}

// completion is one answer of the model.
type completion struct {
	Content      string
	ToolCalls    []ToolCall
	FinishReason string
	Usage        Usage
	Model        string
	Duration     time.Duration
}

// model talks to one endpoint.
type model struct {
	c    openai.Client
	o    ModelOptions
	host string // the endpoint as messages name it: scheme, host and path
}

func newModel(o ModelOptions) (*model, error) {
	u, err := url.Parse(o.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("model endpoint %q: want an http or https URL such as http://127.0.0.1:8080/v1: %w", redactURL(o.BaseURL), sandbox.ErrInvalid)
	}
	if o.Model == "" {
		return nil, fmt.Errorf("no model named (--model): %w", sandbox.ErrInvalid)
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Minute
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 2 * time.Minute
	}
	if o.Retries == 0 {
		o.Retries = 2
	}
	if o.Retries < 0 {
		o.Retries = 0
	}
	opts := []option.RequestOption{option.WithBaseURL(o.BaseURL), option.WithAPIKey(o.APIKey),
		option.WithMaxRetries(o.Retries), option.WithMaxRetryDelay(8 * time.Second)}
	if o.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(o.HTTPClient))
	}
	return &model{c: openai.NewClient(opts...), o: o, host: redactURL(o.BaseURL)}, nil
}

// redactURL drops a URL's user information and query, which may hold
// credentials.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(an unparsable URL)"
	}
	u.User = nil
	u.RawQuery = ""
	u.Fragment = ""
	return u.String()
}

// Causes of a model call's end that the model's own deadlines set.
var (
	errTooSlow = errors.New("too slow")
	errStalled = errors.New("stalled")
)

// call is one request to the model.
type call struct {
	msgs  []Message
	specs []tools.Spec
}

// complete asks the model once. An error is ctx's when ctx ended, else
// one wrapping ErrModel that says what the endpoint did.
func (m *model) complete(ctx context.Context, c call) (completion, error) {
	p := openai.ChatCompletionNewParams{Model: m.o.Model, Messages: params(c.msgs)}
	if len(c.specs) > 0 {
		p.Tools = toolParams(c.specs)
	}
	start := time.Now()
	cctx, cancel := context.WithTimeoutCause(ctx, m.o.Timeout, errTooSlow)
	defer cancel()
	var out completion
	var err error
	if m.o.Stream {
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		out, err = m.stream(cctx, p)
	} else {
		var cc *openai.ChatCompletion
		cc, err = m.c.Chat.Completions.New(cctx, p)
		if err == nil {
			out, err = fromCompletion(cc)
		}
	}
	out.Duration = time.Since(start)
	if err == nil {
		return out, nil
	}
	if ctx.Err() != nil {
		return out, ctx.Err()
	}
	return out, m.explain(context.Cause(cctx), err)
}

// stream asks for the answer as server-sent events and puts it together.
func (m *model) stream(ctx context.Context, p openai.ChatCompletionNewParams) (completion, error) {
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The idle timer runs from the first chunk on; before it, the answer's
	// Timeout alone bounds the wait (a long prompt may take minutes to
	// read, and retries wait between attempts).
	var idle *time.Timer
	defer func() {
		if idle != nil {
			idle.Stop()
		}
	}()
	s := m.c.Chat.Completions.NewStreaming(sctx, p)
	defer s.Close()
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for s.Next() {
		if idle == nil {
			idle = time.AfterFunc(m.o.IdleTimeout, func() { cancel(errStalled) })
		} else {
			idle.Reset(m.o.IdleTimeout)
		}
		if !acc.AddChunk(s.Current()) {
			return completion{}, fmt.Errorf("chunk %d of the stream does not fit the ones before it", chunks+1)
		}
		chunks++
	}
	if err := s.Err(); err != nil {
		if c := context.Cause(sctx); errors.Is(c, errStalled) {
			return completion{}, c
		}
		return completion{}, err
	}
	if chunks == 0 {
		return completion{}, errors.New("the stream ended before its first chunk")
	}
	if len(acc.Choices) > 0 && acc.Choices[0].FinishReason == "" {
		return completion{}, fmt.Errorf("the stream ended after %d chunks, before the answer was complete", chunks)
	}
	return fromCompletion(&acc.ChatCompletion)
}

// fromCompletion reads the first choice of an answer.
func fromCompletion(cc *openai.ChatCompletion) (completion, error) {
	if len(cc.Choices) == 0 {
		return completion{}, errors.New("the answer has no choice in it")
	}
	ch := cc.Choices[0]
	out := completion{Content: ch.Message.Content, FinishReason: ch.FinishReason, Model: cc.Model,
		Usage: Usage{Prompt: cc.Usage.PromptTokens, Completion: cc.Usage.CompletionTokens, Cached: cc.Usage.PromptTokensDetails.CachedTokens}}
	if out.Content == "" && ch.Message.Refusal != "" {
		out.Content = ch.Message.Refusal
	}
	for _, tc := range ch.Message.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	return out, nil
}

// explain words a failed call, wrapping ErrModel.
func (m *model) explain(cause, err error) error {
	var apiErr *openai.Error
	var netErr net.Error
	var opErr *net.OpError
	switch {
	case errors.Is(cause, errTooSlow):
		return fmt.Errorf("%w: %s did not answer within %v", ErrModel, m.host, m.o.Timeout)
	case errors.Is(cause, errStalled) || errors.Is(err, errStalled):
		return fmt.Errorf("%w: %s stopped sending its answer (nothing for %v)", ErrModel, m.host, m.o.IdleTimeout)
	case errors.As(err, &apiErr):
		msg := strings.TrimSpace(apiErr.Message)
		if len(msg) > 300 {
			msg = msg[:300] + "…"
		}
		what := fmt.Sprintf("%s answered %d %s", m.host, apiErr.StatusCode, http.StatusText(apiErr.StatusCode))
		if msg != "" {
			what += ": " + msg
		}
		if apiErr.StatusCode == http.StatusTooManyRequests || apiErr.StatusCode >= 500 {
			what += fmt.Sprintf(" (after %d retries)", m.o.Retries)
		}
		return fmt.Errorf("%w: %s", ErrModel, what)
	case errors.As(err, &opErr) && opErr.Op == "dial":
		return fmt.Errorf("%w: %s cannot be reached (%v; tried %d times)", ErrModel, m.host, opErr.Err, m.o.Retries+1)
	case errors.As(err, &netErr):
		return fmt.Errorf("%w: %s: the connection failed: %v", ErrModel, m.host, netErr)
	}
	return fmt.Errorf("%w: %s gave an answer that is not a chat completion: %v", ErrModel, m.host, err)
}
