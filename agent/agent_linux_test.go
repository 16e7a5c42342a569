package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/agent"
	"github.com/airlock-sandbox/airlock/agent/agenttest"
	"github.com/airlock-sandbox/airlock/artifact"
	"github.com/airlock-sandbox/airlock/backend/backendtest"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/internal/testsession"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/session"
	"github.com/airlock-sandbox/airlock/tools"
)

func TestMain(m *testing.M) {
	os.Exit(backendtest.Main(m, func() []string { return nil }))
}

const key = "sk-live-QzL8vN3pT6wY1bR4cE7hJ0kM"

// harness is one run's world: a session manager, a scripted model, an
// input file, an output folder, the transcript and the progress.
type harness struct {
	m                    *session.Manager
	model                *agenttest.Model
	cfg                  agent.Config
	out                  string
	transcript, progress *testenv.Buffer
}

func newHarness(t *testing.T, stream bool, script agenttest.Script) *harness {
	t.Helper()
	h := &harness{m: testsession.Manager(t, nil), transcript: &testenv.Buffer{}, progress: &testenv.Buffer{}}
	h.model = agenttest.New(t, key, script)
	dir := t.TempDir()
	in := filepath.Join(dir, "sales.csv")
	if err := os.WriteFile(in, []byte("region,month,revenue\nnorth,2024-01,100\nsouth,2024-01,-5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.out = filepath.Join(dir, "out")
	if err := os.Mkdir(h.out, 0o755); err != nil {
		t.Fatal(err)
	}
	pol := sandbox.Policy{Limits: sandbox.Limits{Timeout: sandbox.Duration(20 * time.Second)}}
	s := testsession.Python(t, h.m, pol)
	h.cfg = agent.Config{Task: "Find the negative revenue and write it to a CSV.", Sandbox: tools.Local(s),
		Session: agent.SessionInfo{ID: s.ID(), Backend: "native", Image: testsession.Image, Policy: s.Policy()},
		Env:     tools.Env{Image: testsession.Image, About: "python3 with pandas", Limits: s.Policy().Limits},
		Inputs:  []agent.Input{{Path: in, Name: "sales.csv"}},
		Model:   agent.ModelOptions{BaseURL: h.model.URL, APIKey: key, Model: "scripted", Stream: stream, Timeout: 20 * time.Second},
		Output:  artifact.Destination{Dir: h.out}, Transcript: h.transcript, Progress: h.progress}
	return h
}

func (h *harness) run(t *testing.T) (agent.Report, error) {
	t.Helper()
	rep, err := agent.Run(context.Background(), h.cfg)
	t.Logf("progress:\n%s", h.progress)
	if n := len(h.m.List("")); n != 0 {
		t.Errorf("%d sessions alive after the run; Run destroys its session", n)
	}
	for what, text := range map[string]string{"transcript": h.transcript.String(), "progress": h.progress.String(), "error": fmt.Sprint(err)} {
		if strings.Contains(text, key) {
			t.Errorf("the key is in the %s", what)
		}
	}
	b, _ := json.Marshal(rep)
	if strings.Contains(string(b), key) {
		t.Error("the key is in the report")
	}
	return rep, err
}

func (h *harness) records(t *testing.T) []agent.Record {
	t.Helper()
	recs, err := agent.ReadTranscript(strings.NewReader(h.transcript.String()))
	if err != nil {
		t.Fatalf("the transcript does not parse: %v", err)
	}
	return recs
}

func tc(id, name string, args any) agenttest.ToolCall {
	raw, ok := args.(string)
	if !ok {
		b, _ := json.Marshal(args)
		raw = string(b)
	}
	return agenttest.ToolCall{ID: id, Name: name, Arguments: raw}
}

func calls(c ...agenttest.ToolCall) agenttest.Reply { return agenttest.Reply{ToolCalls: c} }

// lastTool returns the content of the tool message answering id in req.
func lastTool(req agenttest.Request, id string) string {
	for _, m := range req.Messages {
		if m.Role == "tool" && m.ToolCallID == id {
			return m.Content
		}
	}
	return "(no tool message for " + id + ")"
}

// TestLoop drives the loop through a real python sandbox, streaming and
// not: the task and the input's first rows reach the model, the tool
// calls run and their observations go back, the model's answer ends the
// run, the artifacts land in the output folder, and the transcript and
// the report hold every step with its tokens.
func TestLoop(t *testing.T) {
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			script := []agenttest.Reply{
				calls(tc("c1", tools.ListFiles, "{}")),
				calls(tc("c2", tools.RunCommand, map[string]any{"command": "grep -- ',-' /workspace/input/sales.csv > /workspace/output/negative.csv; env; cat /workspace/output/negative.csv"})),
				calls(tc("c3", tools.WriteFile, map[string]any{"path": "output/notes.md", "content": "# Notes\nsouth has -5\n"}), tc("c4", tools.ListArtifacts, "")),
				{Content: "The negative revenue is south's -5 in 2024-01; it is in negative.csv."},
			}
			var h *harness
			h = newHarness(t, stream, func(n int, req agenttest.Request) agenttest.Reply {
				switch n {
				case 0:
					if req.Messages[0].Role != "system" || !strings.Contains(req.Messages[0].Content, "/workspace/output") ||
						!strings.Contains(req.Messages[1].Content, "Find the negative revenue") ||
						!strings.Contains(req.Messages[1].Content, "sales.csv (56 bytes)") || !strings.Contains(req.Messages[1].Content, "south,2024-01,-5") {
						t.Errorf("the first request does not carry the task and the file's name, size and rows: %+v", req.Messages)
					}
				case 1:
					if got := lastTool(req, "c1"); !strings.Contains(got, "sales.csv  56 B") {
						t.Errorf("list_files observation: %s", got)
					}
				case 2:
					got := lastTool(req, "c2")
					if !strings.Contains(got, "exit 0") || !strings.Contains(got, "south,2024-01,-5") || !strings.Contains(got, "new or changed in /workspace/output: negative.csv") {
						t.Errorf("run_command observation: %s", got)
					}
					if strings.Contains(got, "OPENAI") || strings.Contains(got, key) {
						t.Errorf("the sandbox's environment holds the endpoint's settings: %s", got)
					}
				case 3:
					if got := lastTool(req, "c4"); !strings.Contains(got, "negative.csv") || !strings.Contains(got, "notes.md  21 B  accepted") {
						t.Errorf("list_artifacts observation: %s", got)
					}
				}
				if n < len(script) {
					r := script[n]
					r.Usage = agenttest.Usage{Prompt: 1000 * (n + 1), Completion: 50, Cached: 500 * n}
					return r
				}
				t.Errorf("request %d: the script is over", n)
				return agenttest.Reply{Content: "over"}
			})
			rep, err := h.run(t)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Stop != agent.StopAnswered || rep.Steps != 4 || !strings.Contains(rep.Answer, "south's -5") {
				t.Errorf("report: %+v", rep)
			}
			if want := (agent.Usage{Prompt: 10000, Completion: 200, Cached: 3000}); rep.Usage != want {
				t.Errorf("usage %+v, want %+v", rep.Usage, want)
			}
			if len(rep.StepLog) != 4 || rep.StepLog[2].Usage.Prompt != 3000 || strings.Join(rep.StepLog[2].Tools, ",") != "write_file,list_artifacts" ||
				rep.ModelMS <= 0 || rep.SandboxMS <= 0 {
				t.Errorf("step log: %+v", rep.StepLog)
			}
			got, _ := os.ReadFile(filepath.Join(h.out, "negative.csv"))
			if string(got) != "south,2024-01,'-5\n" && string(got) != "south,2024-01,-5\n" {
				t.Errorf("negative.csv in the output: %q", got)
			}
			if _, err := os.Stat(filepath.Join(h.out, "notes.md")); err != nil {
				t.Error(err)
			}
			kinds := map[string]int{}
			for _, r := range h.records(t) {
				kinds[r.Type]++
				if r.Type == agent.RecResponse && (r.Usage == nil || r.Usage.Prompt == 0) {
					t.Errorf("a response without its tokens: %+v", r)
				}
				if r.Type == agent.RecToolResult && r.Observation == "" {
					t.Errorf("a tool result without its observation: %+v", r)
				}
			}
			want := map[string]int{agent.RecStart: 1, agent.RecPreview: 1, agent.RecRequest: 4, agent.RecResponse: 4,
				agent.RecToolCall: 4, agent.RecToolResult: 4, agent.RecEnd: 1}
			for k, n := range want {
				if kinds[k] != n {
					t.Errorf("%d %s records, want %d", kinds[k], k, n)
				}
			}
			for _, w := range []string{"step 2   run_command", "grep -- ',-' /workspace/input/sales.csv", "new: negative.csv",
				"airlock agent: answered after 4 steps", "tokens: 10,200 in all: prompt 10,000 (3,000 cached), completion 200"} {
				if !strings.Contains(h.progress.String(), w) {
					t.Errorf("the progress lacks %q:\n%s", w, h.progress.String())
				}
			}
		})
	}
}

// TestLimits: each limit ends the run cleanly, says which, and keeps the
// artifacts written before it.
func TestLimits(t *testing.T) {
	write := tc("w", tools.RunCommand, map[string]any{"command": "echo a,b > /workspace/output/early.csv"})
	busy := func(n int, _ agenttest.Request) agenttest.Reply {
		if n == 0 {
			return agenttest.Reply{ToolCalls: []agenttest.ToolCall{write}, Usage: agenttest.Usage{Prompt: 4000, Completion: 100}}
		}
		return agenttest.Reply{ToolCalls: []agenttest.ToolCall{tc(fmt.Sprint("l", n), tools.ListFiles, map[string]any{"path": fmt.Sprintf("/tmp/%d", n)})},
			Usage: agenttest.Usage{Prompt: 4000, Completion: 100}}
	}
	prices := agent.Prices{Input: 2, Output: 10} // $ per million: a step is $0.009
	for _, c := range []struct {
		name   string
		limits agent.Limits
		script agenttest.Script
		stop   string
		detail string
		steps  int
	}{
		{"steps", agent.Limits{MaxSteps: 3}, busy, agent.StopMaxSteps, "reached the step limit of 3 model calls", 3},
		{"tokens", agent.Limits{MaxTokens: 10000}, busy, agent.StopMaxTokens, "used 12,300 tokens, at or over the limit of 10,000", 3},
		{"cost", agent.Limits{MaxCost: 0.02}, busy, agent.StopMaxCost, "spent $0.0270, at or over the limit of $0.0200", 3},
		{"time", agent.Limits{MaxTime: 3 * time.Second}, func(n int, req agenttest.Request) agenttest.Reply {
			if n == 0 {
				return busy(0, req)
			}
			return calls(tc("s", tools.RunCommand, map[string]any{"command": "sleep 15"}))
		}, agent.StopMaxTime, "reached the wall-time limit of 3s", 2},
		{"slow model", agent.Limits{MaxTime: 3 * time.Second}, func(n int, req agenttest.Request) agenttest.Reply {
			if n == 0 {
				return busy(0, req)
			}
			return agenttest.Reply{Delay: 15 * time.Second}
		}, agent.StopMaxTime, "reached the wall-time limit of 3s", 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, true, c.script)
			h.cfg.Limits = c.limits
			h.cfg.Prices = &prices
			start := time.Now()
			rep, err := h.run(t)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Stop != c.stop || rep.Detail != c.detail || rep.Steps != c.steps {
				t.Errorf("stop %q (%s) after %d steps, want %q (%s) after %d", rep.Stop, rep.Detail, rep.Steps, c.stop, c.detail, c.steps)
			}
			if took := time.Since(start); took > 12*time.Second {
				t.Errorf("the run took %v", took)
			}
			if _, err := os.Stat(filepath.Join(h.out, "early.csv")); err != nil {
				t.Errorf("the artifact written before the limit is not kept: %v", err)
			}
			if rep.CostUSD == nil || *rep.CostUSD <= 0 {
				t.Errorf("no cost: %+v", rep.CostUSD)
			}
			if !strings.Contains(h.progress.String(), "stopped at the") {
				t.Errorf("the progress does not say the run stopped:\n%s", h.progress.String())
			}
			recs := h.records(t)
			if end := recs[len(recs)-1]; end.Type != agent.RecEnd || end.Stop != c.stop || end.Result == nil {
				t.Errorf("the transcript's last record: %+v", end)
			}
		})
	}
}

// TestBadCalls: malformed arguments, unknown tools, calls without a name,
// huge arguments and the same call over and over get a clear tool error,
// and the loop goes on to the model's answer.
func TestBadCalls(t *testing.T) {
	same := tc("", tools.ListFiles, `{"path": "/tmp"}`)
	script := []agenttest.Reply{
		calls(tc("a", tools.RunCommand, `{"command": "ls"`), tc("b", "delete_everything", "{}"), tc("c", "", "{}")),
		calls(tc("d", tools.WriteFile, map[string]any{"path": "output/x.txt", "content": strings.Repeat("x", tools.DefaultMaxArgs+1)})),
		calls(same), calls(same), calls(same), calls(same),
		{Content: "I could not do it."},
	}
	h := newHarness(t, false, func(n int, req agenttest.Request) agenttest.Reply {
		switch n {
		case 1:
			for id, want := range map[string]string{"a": "not a valid JSON object", "b": `there is no tool "delete_everything"`, "c": "has no tool name"} {
				if got := lastTool(req, id); !strings.Contains(got, want) {
					t.Errorf("call %s: %q, want %q", id, got, want)
				}
			}
		case 2:
			if got := lastTool(req, "d"); !strings.Contains(got, "a call may take") {
				t.Errorf("huge arguments: %q", got)
			}
		case 5, 6:
			last := req.Messages[len(req.Messages)-1]
			if !strings.Contains(last.Content, fmt.Sprintf("came %d times in a row", n-2)) {
				t.Errorf("request %d: a repeated call was not refused: %q", n, last.Content)
			}
		case 4:
			if last := req.Messages[len(req.Messages)-1]; strings.Contains(last.Content, "same call") {
				t.Errorf("the second identical call was refused: %q", last.Content)
			}
		}
		return script[min(n, len(script)-1)]
	})
	rep, err := h.run(t)
	if err != nil || rep.Stop != agent.StopAnswered || rep.Steps != 7 {
		t.Errorf("report %+v, %v", rep, err)
	}
}

// TestEndpointFails: an endpoint that is down, fails mid-run or answers
// garbage ends the run with a clear error; the session is destroyed and
// what was written before is kept.
func TestEndpointFails(t *testing.T) {
	for _, c := range []struct {
		name  string
		fault agenttest.Reply
		want  string
	}{
		{"overloaded", agenttest.Reply{Status: 500}, "answered 500 Internal Server Error"},
		{"garbage", agenttest.Reply{Garbage: "Bad Gateway, try later"}, "not a chat completion"},
		{"refuses the key", agenttest.Reply{Status: 401}, "answered 401 Unauthorized"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, false, func(n int, _ agenttest.Request) agenttest.Reply {
				if n == 0 {
					return calls(tc("w", tools.RunCommand, map[string]any{"command": "echo a,b > /workspace/output/early.csv"}))
				}
				return c.fault
			})
			h.cfg.Model.Retries = -1
			rep, err := h.run(t)
			if !errors.Is(err, agent.ErrModel) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want ErrModel saying %q", err, c.want)
			}
			if rep.Stop != agent.StopModelFailed || !strings.Contains(rep.Detail, c.want) {
				t.Errorf("report %s: %s", rep.Stop, rep.Detail)
			}
			if _, err := os.Stat(filepath.Join(h.out, "early.csv")); err != nil {
				t.Errorf("the artifact written before the failure is not kept: %v", err)
			}
		})
	}
	h := newHarness(t, true, func(int, agenttest.Request) agenttest.Reply { return agenttest.Reply{} })
	h.cfg.Model.BaseURL = "http://127.0.0.1:1/v1"
	h.cfg.Model.Retries = -1
	rep, err := h.run(t)
	if !errors.Is(err, agent.ErrModel) || !strings.Contains(err.Error(), "cannot be reached") || rep.Stop != agent.StopModelFailed || rep.Steps != 1 {
		t.Errorf("an endpoint that is down: %v, %+v", err, rep)
	}
}

// TestVision: with a model that takes images, an image a tool call
// produced goes back as an image part; without, only its description.
func TestVision(t *testing.T) {
	png := "import struct, zlib\n" +
		"def chunk(t, d): return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d))\n" +
		"raw = b''.join(b'\\x00' + b'\\xff\\x00\\x00' * 8 for _ in range(4))\n" +
		"open('/workspace/output/red.png', 'wb').write(b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 8, 4, 8, 2, 0, 0, 0)) + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b''))\n"
	for _, vision := range []bool{true, false} {
		t.Run(fmt.Sprintf("vision=%v", vision), func(t *testing.T) {
			var saw []agenttest.Message
			h := newHarness(t, true, func(n int, req agenttest.Request) agenttest.Reply {
				switch n {
				case 0:
					return calls(tc("p", tools.RunCommand, map[string]any{"command": "python3 - <<'EOF'\n" + png + "EOF"}))
				case 1:
					return calls(tc("r", tools.ReadFile, map[string]any{"path": "output/red.png"}))
				case 2:
					saw = req.Messages
					return calls(tc("l", tools.ListFiles, "{}"))
				case 3:
					if vision && req.Messages[len(saw)-1].Images != 0 {
						t.Errorf("an old image is sent again")
					}
				}
				return agenttest.Reply{Content: "It is red."}
			})
			h.cfg.Env.Vision = vision
			if _, err := h.run(t); err != nil {
				t.Fatal(err)
			}
			last := saw[len(saw)-1]
			if vision && (last.Role != "user" || last.Images != 1) {
				t.Errorf("vision: the last message is %+v, want a user message with one image", last)
			}
			if !vision && (last.Role != "tool" || !strings.Contains(last.Content, "image/png 8×4") || !strings.Contains(last.Content, "not shown")) {
				t.Errorf("no vision: the last message is %+v", last)
			}
		})
	}
}
