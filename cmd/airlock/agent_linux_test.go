package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/agent/agenttest"
	"github.com/airlock-sandbox/airlock/internal/testimage"
)

const agentKey = "sk-cli-9f8e7d6c5b4a3210"

// agentEnv is the environment of an airlock agent run against model.
func agentEnv(t *testing.T, model *agenttest.Model) func(string) string {
	home := filepath.Dir(testimage.Store(t).Dir())
	vars := map[string]string{"OPENAI_BASE_URL": model.URL, "OPENAI_API_KEY": agentKey, "AIRLOCK_HOME": home}
	return func(k string) string { return vars[k] }
}

// TestAgentCLI: airlock agent runs the loop, prints the answer on stdout
// and the progress and summary on stderr, writes the artifacts and the
// transcript to --output, exits by the CLI contract, and replays.
func TestAgentCLI(t *testing.T) {
	needRoot(t)
	model := agenttest.New(t, agentKey, func(n int, req agenttest.Request) agenttest.Reply {
		if last := req.Messages[len(req.Messages)-1]; last.Role != "tool" {
			return agenttest.Reply{ToolCalls: []agenttest.ToolCall{{ID: "c1", Name: "run_command",
				Arguments: `{"command": "wc -l < /workspace/input/data.csv > /workspace/output/count.txt; cat /workspace/output/count.txt"}`}}}
		}
		return agenttest.Reply{Content: "The file has 3 lines; see count.txt."}
	})
	dir := t.TempDir()
	in := filepath.Join(dir, "data.csv")
	if err := os.WriteFile(in, []byte("a,b\n1,2\n3,4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	c := cliRun{getenv: agentEnv(t, model)}
	stdout, stderr, code := c.run(t, "agent", "--model", "scripted", "--input", in, "--output", out, "--price", "input=1,output=2", "Count the lines.")
	if code != 0 || stdout != "The file has 3 lines; see count.txt.\n" {
		t.Fatalf("exit %d\nstdout %q\nstderr %s", code, stdout, stderr)
	}
	for _, w := range []string{"step 1   run_command", "airlock agent: answered after 2 steps", "cost $", "artifacts in " + out + ": count.txt"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, stderr)
		}
	}
	got, _ := os.ReadFile(filepath.Join(out, "count.txt"))
	if strings.TrimSpace(string(got)) != "3" {
		t.Errorf("count.txt: %q", got)
	}
	tr, err := os.ReadFile(filepath.Join(out, "transcript.jsonl"))
	if err != nil || strings.Count(string(tr), "\n") < 8 {
		t.Fatalf("transcript: %v, %d lines", err, strings.Count(string(tr), "\n"))
	}
	if strings.Contains(string(tr)+stdout+stderr, agentKey) {
		t.Error("the key is in the output or the transcript")
	}

	stdout, stderr, code = c.run(t, "agent", "replay", filepath.Join(out, "transcript.jsonl"))
	if code != 0 || !strings.Contains(stderr, "1 tool calls, 1 the same, 0 differ") {
		t.Errorf("replay: exit %d\n%s%s", code, stdout, stderr)
	}

	stdout, stderr, code = c.run(t, "agent", "--model", "scripted", "--json", "--max-steps", "1", "Count the lines.")
	var rep struct {
		Stop  string `json:"stop"`
		Steps int    `json:"steps"`
		Usage struct {
			Prompt int `json:"prompt"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || code != exitLimit || rep.Stop != "max_steps" || rep.Steps != 1 || rep.Usage.Prompt == 0 || stderr != "" {
		t.Errorf("--json at a limit: exit %d, %+v, %v\nstdout %s\nstderr %s", code, rep, err, stdout, stderr)
	}

	down := cliRun{getenv: func(k string) string {
		if k == "OPENAI_BASE_URL" {
			return "http://127.0.0.1:1/v1"
		}
		return agentEnv(t, model)(k)
	}}
	_, stderr, code = down.run(t, "agent", "--model", "m", "--retries", "0", "task")
	if code != exitModel || !strings.Contains(stderr, "cannot be reached") {
		t.Errorf("an endpoint that is down: exit %d\n%s", code, stderr)
	}
}

// TestAgentUsage: command-line mistakes exit 2 and say what is wrong.
func TestAgentUsage(t *testing.T) {
	env := func(k string) string { return map[string]string{"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}[k] }
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"agent", "task"}, "--model (or OPENAI_MODEL) names no model"},
		{[]string{"agent", "--model", "m"}, "give the task as one argument"},
		{[]string{"agent", "--model", "m", "--max-cost", "1", "task"}, "--max-cost needs --price or --prices"},
		{[]string{"agent", "--model", "m", "--price", "input=x", "task"}, `price "input=x"`},
		{[]string{"agent", "--model", "m", "--skills", "/nonexistent", "task"}, "--skills"},
		{[]string{"agent", "replay"}, "give one transcript file"},
		{[]string{"mcp", "--keys-file", "k"}, "--keys-file applies to --http"},
		{[]string{"mcp", "--http", "0.0.0.0:0"}, "without API keys would let anyone run code here"},
	} {
		_, stderr, code := cliRun{getenv: env}.run(t, c.args...)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, stderr, c.want)
		}
	}
	if out, _, code := (cliRun{}).run(t, "agent", "--help"); code != 0 || !strings.Contains(out, "usage: airlock agent") {
		t.Errorf("agent --help: %d %q", code, out)
	}
	if out, _, code := (cliRun{}).run(t, "mcp", "--help"); code != 0 || !strings.Contains(out, "usage: airlock mcp") {
		t.Errorf("mcp --help: %d %q", code, out)
	}
}
