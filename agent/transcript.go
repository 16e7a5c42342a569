package agent

import (
	"encoding/json"
	"io"
	"strings"
	"sync"
	"time"
)

// Record types of the transcript, one JSON object a line.
const (
	RecStart      = "start"       // the run: task, model, sandbox, limits, inputs, skills, tools, system prompt
	RecPreview    = "preview"     // the inputs' first rows, as the sandbox read them
	RecRequest    = "request"     // a request to the model: the messages added since the agent's last one
	RecResponse   = "response"    // its answer: content, tool calls, usage, cost, time
	RecToolCall   = "tool_call"   // a call the model asked for, before it runs
	RecToolResult = "tool_result" // its observation, what changed in the output, its time in the sandbox
	RecPlan       = "plan"        // the orchestrator's subtasks
	RecSubtask    = "subtask"     // a sub-agent's end and its report
	RecEnd        = "end"         // why the run ended, the answer, the token economics, the artifacts
)

// Record is one line of the transcript. Type says which fields are set.
type Record struct {
	Type  string    `json:"type"`
	Time  time.Time `json:"time"`
	Agent string    `json:"agent,omitempty"`
	Step  int       `json:"step,omitempty"`

	// start
	Start *StartInfo `json:"start,omitempty"`

	// preview
	Text string `json:"text,omitempty"`

	// request: Messages from MessagesFrom on (the agent's earlier
	// requests hold the ones before).
	MessagesFrom int       `json:"messages_from,omitempty"`
	Messages     []Message `json:"messages,omitempty"`

	// response
	Content      string     `json:"content,omitempty"`
	ToolCalls    []ToolCall `json:"tool_calls,omitempty"`
	FinishReason string     `json:"finish_reason,omitempty"`
	Usage        *Usage     `json:"usage,omitempty"`
	CostUSD      *float64   `json:"cost_usd,omitempty"`
	ModelMS      float64    `json:"model_ms,omitempty"`

	// tool_call and tool_result
	CallID      string     `json:"call_id,omitempty"`
	Tool        string     `json:"tool,omitempty"`
	Arguments   string     `json:"arguments,omitempty"`
	Observation string     `json:"observation,omitempty"`
	IsError     bool       `json:"is_error,omitempty"`
	Images      []ImageRef `json:"images,omitempty"`
	Changed     []string   `json:"changed,omitempty"`
	SandboxMS   float64    `json:"sandbox_ms,omitempty"`

	// plan and subtask
	Subtasks []Subtask `json:"subtasks,omitempty"`
	Index    int       `json:"index,omitempty"`
	Report   string    `json:"report,omitempty"`

	// end (and a subtask's end)
	Stop   string  `json:"stop,omitempty"`
	Detail string  `json:"detail,omitempty"`
	Result *Report `json:"result,omitempty"`
}

// StartInfo is what the start record says about the run.
type StartInfo struct {
	Task     string          `json:"task"`
	Model    string          `json:"model"`
	Endpoint string          `json:"endpoint"`
	Stream   bool            `json:"stream"`
	Session  SessionInfo     `json:"session"`
	Limits   Limits          `json:"limits"`
	Sub      *Limits         `json:"sub_limits,omitempty"`
	Prices   *Prices         `json:"prices,omitempty"`
	Plan     bool            `json:"plan,omitempty"`
	Vision   bool            `json:"vision,omitempty"`
	Inputs   []InputInfo     `json:"inputs"`
	Skills   []SkillInfo     `json:"skills"`
	Tools    json.RawMessage `json:"tools"`
	System   string          `json:"system"`
}

// transcript writes records as JSON lines, with the key removed.
type transcript struct {
	mu  sync.Mutex
	w   io.Writer
	red redactor
	now func() time.Time
	err error
}

func (t *transcript) write(r Record) {
	if t == nil || t.w == nil {
		return
	}
	r.Time = t.now().UTC()
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	b = append([]byte(t.red.String(string(b))), '\n')
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		_, t.err = t.w.Write(b)
	}
}

// redactor removes a secret from text, as it is and as JSON escapes it.
type redactor struct{ forms []string }

// minSecret is the shortest key that is removed from output; shorter
// ones would mangle ordinary text and guard nothing.
const minSecret = 6

func newRedactor(secret string) redactor {
	if len(secret) < minSecret {
		return redactor{}
	}
	forms := []string{secret}
	if b, err := json.Marshal(secret); err == nil {
		if esc := string(b[1 : len(b)-1]); esc != secret {
			forms = append(forms, esc)
		}
	}
	return redactor{forms}
}

// Redacted stands for the key wherever it would have appeared.
const Redacted = "[redacted]"

// String is s without the secret.
func (r redactor) String(s string) string {
	for _, f := range r.forms {
		s = strings.ReplaceAll(s, f, Redacted)
	}
	return s
}

// ReadTranscript reads a transcript's records.
func ReadTranscript(r io.Reader) ([]Record, error) {
	dec := json.NewDecoder(r)
	var out []Record
	for {
		var rec Record
		if err := dec.Decode(&rec); err == io.EOF {
			return out, nil
		} else if err != nil {
			return out, err
		}
		out = append(out, rec)
	}
}
