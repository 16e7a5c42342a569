package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/agent"
	"github.com/airlock-sandbox/airlock/agent/agenttest"
	"github.com/airlock-sandbox/airlock/internal/testsession"
	"github.com/airlock-sandbox/airlock/tools"
)

// TestPlan: the orchestrator splits the task, each subtask runs as a
// sub-agent in the same session with its own budget, a sub-agent sees the
// earlier reports and the files they left, the orchestrator sees the
// reports but not the sub-agents' transcripts, and the economics are kept
// per agent and in total.
func TestPlan(t *testing.T) {
	plan := `{"subtasks": [{"title": "Extract", "instructions": "Write the negative rows to output/neg.csv."},
		{"title": "Count", "instructions": "Count the rows of output/neg.csv."},
		{"title": "Polish", "instructions": "Make it nice."}]}`
	h := newHarness(t, true, func(n int, req agenttest.Request) agenttest.Reply {
		user := ""
		if len(req.Messages) > 1 {
			user = req.Messages[1].Content
		}
		steps := 0
		for _, m := range req.Messages {
			if m.Role == "assistant" {
				steps++
			}
		}
		switch {
		case len(req.Tools) == 1 && req.Tools[0] == "submit_plan":
			return calls(tc("p", "submit_plan", plan))
		case strings.Contains(user, "Your subtask, 1 of 3"):
			if steps == 0 {
				return calls(tc("s1", tools.RunCommand, map[string]any{"command": "grep -- ',-' /workspace/input/sales.csv > /workspace/output/neg.csv; echo SUBAGENT-ONLY-MARKER"}))
			}
			return agenttest.Reply{Content: "Wrote output/neg.csv with the negative rows."}
		case strings.Contains(user, "Your subtask, 2 of 3"):
			if !strings.Contains(user, "1. Wrote output/neg.csv with the negative rows.") {
				t.Errorf("subtask 2 does not see subtask 1's report:\n%s", user)
			}
			if steps == 0 {
				return calls(tc("s2", tools.RunCommand, map[string]any{"command": "wc -l < /workspace/output/neg.csv"}))
			}
			if got := lastTool(req, "s2"); !strings.HasPrefix(got, "exit 0\n--- stdout ---\n1") {
				t.Errorf("subtask 2 does not find subtask 1's file: %s", got)
			}
			return agenttest.Reply{Content: "neg.csv has 1 row."}
		case strings.Contains(user, "Your subtask, 3 of 3"):
			return calls(tc(fmt.Sprint("s3-", steps), tools.ListFiles, map[string]any{"path": fmt.Sprintf("/tmp/%d", steps)}))
		case strings.Contains(user, "The subtasks and their reports"):
			for _, w := range []string{"Wrote output/neg.csv", "neg.csv has 1 row.", "(stopped early: reached subtask 3's step limit of 3)", "- neg.csv"} {
				if !strings.Contains(user, w) {
					t.Errorf("the compose request lacks %q:\n%s", w, user)
				}
			}
			for _, m := range req.Messages {
				if strings.Contains(m.Content, "SUBAGENT-ONLY-MARKER") {
					t.Error("the orchestrator sees a sub-agent's tool output")
				}
			}
			return agenttest.Reply{Content: "South's -5 is the only negative revenue; see neg.csv."}
		}
		t.Errorf("request %d is none the script knows: %+v", n, req.Messages)
		return agenttest.Reply{Content: "?"}
	})
	h.cfg.Plan = true
	h.cfg.SubLimits = agent.Limits{MaxSteps: 3}
	rep, err := h.run(t)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Stop != agent.StopAnswered || !strings.Contains(rep.Answer, "only negative revenue") || rep.Steps != 9 {
		t.Errorf("report: stop %s, %d steps, answer %q", rep.Stop, rep.Steps, rep.Answer)
	}
	want := []struct {
		name  string
		steps int
		stop  string
	}{{"orchestrator", 2, agent.StopAnswered}, {"subtask 1", 2, agent.StopAnswered}, {"subtask 2", 2, agent.StopAnswered}, {"subtask 3", 3, agent.StopMaxSteps}}
	var sum agent.Usage
	if len(rep.Agents) != len(want) {
		t.Fatalf("agents: %+v", rep.Agents)
	}
	for i, w := range want {
		a := rep.Agents[i]
		if a.Name != w.name || a.Steps != w.steps || a.Stop != w.stop || a.Usage.Prompt == 0 {
			t.Errorf("agent %d: %+v, want %s with %d steps, %s", i, a, w.name, w.steps, w.stop)
		}
		sum.Prompt += a.Usage.Prompt
		sum.Completion += a.Usage.Completion
		sum.Cached += a.Usage.Cached
	}
	if sum != rep.Usage {
		t.Errorf("the agents' usage adds up to %+v, the run's is %+v", sum, rep.Usage)
	}
	kinds := map[string]int{}
	for _, r := range h.records(t) {
		kinds[r.Type]++
	}
	if kinds[agent.RecPlan] != 1 || kinds[agent.RecSubtask] != 3 || kinds[agent.RecResponse] != 9 {
		t.Errorf("transcript records: %v", kinds)
	}
	if _, err := os.Stat(filepath.Join(h.out, "neg.csv")); err != nil {
		t.Error(err)
	}
}

// TestSkills: the repository's skills load, are named to the model, are
// readable in the sandbox and cannot be changed by the code.
func TestSkills(t *testing.T) {
	skills, err := agent.LoadSkills("../skills")
	if err != nil {
		t.Fatal(err)
	}
	if len(skills) != 2 || skills[0].Name != "pptx" || skills[1].Name != "spreadsheet-eda" || !strings.Contains(skills[0].Description, "pptxgenjs") {
		t.Fatalf("skills: %+v", skills)
	}
	h := newHarness(t, false, func(n int, req agenttest.Request) agenttest.Reply {
		switch n {
		case 0:
			sys := req.Messages[0].Content
			if !strings.Contains(sys, "- pptx (/workspace/input/skills/pptx): Build a PowerPoint deck") || !strings.Contains(sys, "- spreadsheet-eda (") {
				t.Errorf("the system prompt does not name the skills:\n%s", sys)
			}
			return calls(tc("r", tools.ReadFile, map[string]any{"path": "/workspace/input/skills/pptx/SKILL.md"}),
				tc("w", tools.RunCommand, map[string]any{"command": "echo evil > /workspace/input/skills/pptx/build_deck.js"}),
				tc("l", tools.ListFiles, "{}"))
		case 1:
			if got := lastTool(req, "r"); !strings.Contains(got, "node /workspace/input/skills/pptx/build_deck.js") {
				t.Errorf("SKILL.md in the sandbox: %s", got)
			}
			if got := lastTool(req, "w"); !strings.Contains(got, "exit 1") || !strings.Contains(got, "Read-only file system") {
				t.Errorf("writing to a skill: %s", got)
			}
			if got := lastTool(req, "l"); !strings.Contains(got, "skills/spreadsheet-eda/eda.py") {
				t.Errorf("list_files: %s", got)
			}
		}
		return agenttest.Reply{Content: "ok"}
	})
	h.cfg.Skills = skills
	if _, err := h.run(t); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	mk := func(rel, body string) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mk("Bad Name/SKILL.md", "# x\nDoes things.\n")
	if _, err := agent.LoadSkills(dir); err == nil || !strings.Contains(err.Error(), "lower-case letters") {
		t.Errorf("a bad name: %v", err)
	}
	os.RemoveAll(filepath.Join(dir, "Bad Name"))
	mk("linked/SKILL.md", "---\nname: linked\ndescription: has a link\n---\n")
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "linked", "passwd")); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.LoadSkills(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a link in a skill: %v", err)
	}
	if _, err := agent.LoadSkills(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no folder") {
		t.Errorf("no skills: %v", err)
	}
}

// TestReplay: a recorded run replays in a fresh sandbox with the same
// observations; with another input file, the replay says so and shows
// where the observations differ.
func TestReplay(t *testing.T) {
	script := []agenttest.Reply{
		calls(tc("a", tools.RunCommand, map[string]any{"command": "sort -t, -k3 -n /workspace/input/sales.csv | tee /workspace/output/sorted.csv"}),
			tc("b", tools.WriteFile, map[string]any{"path": "output/n.md", "content": "# n\n"})),
		calls(tc("c", tools.ReadFile, map[string]any{"path": "output/sorted.csv"}), tc("d", "nope", "{}"), tc("e", tools.ListArtifacts, "{}")),
		{Content: "done"},
	}
	h := newHarness(t, true, func(n int, _ agenttest.Request) agenttest.Reply { return script[min(n, len(script)-1)] })
	if _, err := h.run(t); err != nil {
		t.Fatal(err)
	}
	recs := h.records(t)
	replay := func(inputs []agent.Input) (agent.ReplayReport, string) {
		s := testsession.Python(t, h.m, h.cfg.Session.Policy)
		var out bytes.Buffer
		rep, err := agent.Replay(context.Background(), agent.ReplayConfig{Records: recs, Sandbox: tools.Local(s), Env: h.cfg.Env,
			Inputs: inputs, Progress: &out})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(h.m.List("")); n != 0 {
			t.Errorf("%d sessions alive after the replay", n)
		}
		return rep, out.String()
	}
	rep, out := replay(nil)
	if rep.Calls != 5 || rep.Same != 5 || len(rep.Differs) != 0 || len(rep.Warnings) != 0 {
		t.Errorf("replay: %+v\n%s", rep, out)
	}
	other := filepath.Join(t.TempDir(), "sales.csv")
	if err := os.WriteFile(other, []byte("region,month,revenue\nnorth,2024-01,100\neast,2024-01,-7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, out = replay([]agent.Input{{Path: other, Name: "sales.csv"}})
	if len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "is not the recorded file") || rep.Calls != 5 || len(rep.Differs) < 2 {
		t.Errorf("replay with another input: %+v\n%s", rep, out)
	}
	if len(rep.Differs) > 0 && (!strings.Contains(rep.Differs[0].Diff, "- south,2024-01,-5") || !strings.Contains(rep.Differs[0].Diff, "+ east,2024-01,-7")) {
		t.Errorf("the diff: %s", rep.Differs[0].Diff)
	}
	if !strings.Contains(out, "DIFFERS") || !strings.Contains(out, "differ") {
		t.Errorf("the replay's progress:\n%s", out)
	}
}
