package e2e_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/agent"
	"github.com/airlock-sandbox/airlock/agent/agenttest"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/internal/testimage"
	"github.com/airlock-sandbox/airlock/tools"
)

// modelKey is the scripted model's key.
const modelKey = "sk-remote-agent-5Tq8Zp1Lw3"

func toolCall(id, name string, args map[string]any) agenttest.ToolCall {
	b, _ := json.Marshal(args)
	return agenttest.ToolCall{ID: id, Name: name, Arguments: string(b)}
}

// TestAgentRemote: airlock agent with AIRLOCK_URL set drives a real
// airlock serve: the input and the skill go up (read-only), state
// persists across two run_code calls, write_file's file is listed by
// list_artifacts and lands in --output, the answer is printed, the
// session is gone from the server afterwards, neither key is in the
// transcript, and agent replay of the transcript on the server agrees.
func TestAgentRemote(t *testing.T) {
	home, err := testimage.Home()
	testenv.Require(t, "the python image (bash .ci/lib/image.sh)", err)
	s := startServer(t, serverConfig{home: home})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "data.csv"), []byte("v\n19\n23\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	skill := filepath.Join(dir, "skills", "adder")
	if err := os.MkdirAll(skill, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(skill, "SKILL.md"), []byte("---\nname: adder\ndescription: Adds numbers.\n---\nAdd them.\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	const answer = "The sum is 42; report.txt says so."
	var mu sync.Mutex
	var problems []string
	steps := []struct {
		reply agenttest.Reply
		want  map[string][]string // strings each observation of the step before holds
	}{
		{reply: agenttest.Reply{ToolCalls: []agenttest.ToolCall{toolCall("c1", tools.RunCode, map[string]any{"language": "python",
			"code": "import csv\nrows = list(csv.DictReader(open('/workspace/input/data.csv')))\ntotal = sum(int(r['v']) for r in rows)\n" +
				"skill = open('/workspace/input/skills/adder/SKILL.md').read()\nlen(rows)"})}}},
		{reply: agenttest.Reply{ToolCalls: []agenttest.ToolCall{toolCall("c2", tools.RunCode, map[string]any{"language": "python",
			"code": "print('total', total)\nprint('skill' , 'Add them' in skill)\nopen('/workspace/input/x', 'w')"})}},
			want: map[string][]string{"c1": {"result: 2"}}},
		{reply: agenttest.Reply{ToolCalls: []agenttest.ToolCall{toolCall("w", tools.WriteFile, map[string]any{"path": "/workspace/output/report.txt",
			"content": "total 42\n"})}},
			want: map[string][]string{"c2": {"total 42", "skill True", "[Errno"}}},
		{reply: agenttest.Reply{ToolCalls: []agenttest.ToolCall{toolCall("a", tools.ListArtifacts, map[string]any{})}},
			want: map[string][]string{"w": {"report.txt"}}},
		{reply: agenttest.Reply{Content: answer}, want: map[string][]string{"a": {"report.txt", "accepted"}}},
	}
	model := agenttest.New(t, modelKey, func(_ int, req agenttest.Request) agenttest.Reply {
		k, results := req.Turn()
		mu.Lock()
		defer mu.Unlock()
		if k >= len(steps) {
			problems = append(problems, "a request after the script's end")
			return agenttest.Reply{Content: "the script is over"}
		}
		for id, subs := range steps[k].want {
			for _, sub := range subs {
				if !strings.Contains(results[id], sub) {
					problems = append(problems, "the observation of "+id+" lacks "+sub+": "+results[id])
				}
			}
		}
		for id, obs := range results {
			if strings.Contains(obs, keyA) || strings.Contains(obs, modelKey) {
				problems = append(problems, "the observation of "+id+" holds a key")
			}
		}
		return steps[k].reply
	})

	env := []string{client.EnvURL + "=" + s.url, client.EnvKey + "=" + keyA, "OPENAI_API_KEY=" + modelKey, "AIRLOCK_BACKEND="}
	start := time.Now()
	code, stdout, stderr := runCLI(t, dir, env, "agent", "--image", testimage.Name, "--model", "scripted", "--base-url", model.URL,
		"--input", "data.csv", "--skills", "skills", "--output", "out", "--timeout", "2m", "--max-steps", "10",
		"Add up the column v of data.csv and write a report")
	t.Logf("airlock agent: exit %d in %s\nstderr:\n%s", code, time.Since(start).Round(time.Millisecond), stderr)
	mu.Lock()
	for _, p := range problems {
		t.Error(p)
	}
	mu.Unlock()
	if code != 0 || strings.TrimSpace(stdout) != answer {
		t.Errorf("airlock agent: exit %d, stdout %q; want 0 and the answer", code, stdout)
	}
	if n := len(model.Requests()); n != len(steps) {
		t.Errorf("the model was asked %d times; the script has %d steps", n, len(steps))
	}
	if b, err := os.ReadFile(filepath.Join(dir, "out", "report.txt")); err != nil || string(b) != "total 42\n" {
		t.Errorf("out/report.txt: %q, %v", b, err)
	}
	transcript, err := os.ReadFile(filepath.Join(dir, "out", "transcript.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{keyA, modelKey} {
		if strings.Contains(string(transcript), k) || strings.Contains(stdout+stderr, k) {
			t.Errorf("the key %s… is in the transcript or the output", k[:6])
		}
	}
	var id string
	if recs, err := agent.ReadTranscript(bytes.NewReader(transcript)); err != nil {
		t.Errorf("the transcript: %v", err)
	} else if st := agent.FirstStart(recs); st != nil {
		id = st.Session.ID
	}
	c := s.client(t, keyA, client.Options{})
	cx := ctx(t, time.Minute)
	if id == "" {
		t.Error("the transcript names no session")
	} else if _, err := c.GetSession(cx, id); err == nil {
		t.Errorf("session %s is still on the server after the run", id)
	}
	if list, err := c.ListSessions(cx); err != nil || len(list) != 0 {
		t.Errorf("sessions on the server after the run: %+v, %v", list, err)
	}

	// agent replay runs the recorded calls on the server too, in a fresh
	// session, and finds the same observations.
	code, stdout, stderr = runCLI(t, dir, env, "agent", "replay", "--input", "data.csv", "--skills", "skills", "out/transcript.jsonl")
	if code != 0 {
		t.Errorf("airlock agent replay: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if list, err := c.ListSessions(cx); err != nil || len(list) != 0 {
		t.Errorf("sessions on the server after the replay: %+v, %v", list, err)
	}
}
