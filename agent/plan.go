package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/airlock-sandbox/airlock/tools"
)

// Subtask is one part of a plan.
type Subtask struct {
	Title        string `json:"title"`
	Instructions string `json:"instructions"`
}

// orchestrate runs a task with a plan: one model call splits it into
// subtasks; each runs as a sub-agent with its own budget in the same
// session; the orchestrator sees only their reports, and one more call
// composes the answer. Any limit of the run ends it where it stands.
func (r *run) orchestrate(ctx context.Context) error {
	c := r.cfg
	orch := r.newAgent("orchestrator", "", Limits{})
	orch.msgs = []Message{{Role: RoleSystem, Content: planPrompt(c.Env, c.Skills)}, {Role: RoleUser, Content: taskPrompt(c.Task, r.files)}}
	if stop, detail := orch.limitReached(); stop != "" {
		r.stop, r.detail = stop, detail
		return nil
	}
	comp, sr, err := orch.ask(ctx, []tools.Spec{submitPlan})
	if err != nil {
		if stop, detail, ok := r.ctxStop(ctx); ok {
			r.stop, r.detail = stop, detail
			return nil
		}
		r.stop, r.detail = StopModelFailed, err.Error()
		return err
	}
	plan, how := parsePlan(comp)
	if len(plan) == 0 {
		plan = []Subtask{{Title: "The whole task", Instructions: c.Task}}
	}
	sr.Tools = []string{submitPlan.Name}
	r.tr.write(Record{Type: RecPlan, Agent: orch.rep.Name, Step: sr.Step, Subtasks: plan, Detail: how})
	r.prog.plan(sr, plan, how, r)

	var reports []string
	for i := range plan {
		sub := r.newAgent(fmt.Sprintf("subtask %d", i+1), plan[i].Title, c.SubLimits)
		sub.msgs = []Message{{Role: RoleSystem, Content: r.system}, {Role: RoleUser, Content: subtaskPrompt(c.Task, r.files, plan, i, reports)}}
		answer, stop, detail, err := sub.loop(ctx)
		report := strings.TrimSpace(answer)
		if stop != StopAnswered {
			report = strings.TrimSpace(fmt.Sprintf("(stopped early: %s) %s", detail, report))
		}
		report = tools.Clip(report, maxReport)
		sub.rep.Stop, sub.rep.Report = stop, report
		r.tr.write(Record{Type: RecSubtask, Agent: sub.rep.Name, Index: i + 1, Report: report, Stop: stop, Detail: detail})
		r.prog.say("[%s] %s: %s", sub.rep.Name, stopWord(stop), strings.Join(firstLines(report, 1, 100), ""))
		if err != nil {
			r.stop, r.detail = stop, detail
			return err
		}
		if stop == StopMaxTime || stop == StopInterrupted {
			r.stop, r.detail = stop, detail
			return nil
		}
		if s, d := orch.limitReached(); s != "" {
			r.stop, r.detail = s, d
			return nil
		}
		reports = append(reports, report)
	}

	arts, err := c.Sandbox.Artifacts(ctx)
	if err != nil {
		return r.sandboxFailed(ctx, err)
	}
	var list []string
	for _, a := range arts {
		if a.Verdict != "rejected" {
			list = append(list, fmt.Sprintf("- %s (%s)", a.Path, tools.Bytes(a.Size)))
		}
	}
	if len(list) == 0 {
		list = []string{"(none)"}
	}
	orch.msgs = composePrompt(c.Task, plan, reports, strings.Join(list, "\n"))
	orch.sent = 0
	comp, sr, err = orch.ask(ctx, nil)
	if err != nil {
		if stop, detail, ok := r.ctxStop(ctx); ok {
			r.stop, r.detail = stop, detail
			return nil
		}
		r.stop, r.detail = StopModelFailed, err.Error()
		return err
	}
	r.prog.answer(orch, sr, comp, r)
	r.stop, r.detail, r.answer = StopAnswered, "the orchestrator composed the answer from the subtasks' reports", comp.Content
	orch.rep.Stop = StopAnswered
	return nil
}

// parsePlan reads the subtasks from the orchestrator's answer: the
// submit_plan call's arguments, or else a JSON object or array in its
// text. how says where the plan came from, or why there is none.
func parsePlan(comp completion) ([]Subtask, string) {
	type source struct{ text, how string }
	var sources []source
	for _, tc := range comp.ToolCalls {
		if tc.Name == submitPlan.Name {
			sources = append(sources, source{tc.Arguments, "from the submit_plan call"})
		}
	}
	if i, j := strings.IndexAny(comp.Content, "{["), strings.LastIndexAny(comp.Content, "}]"); i >= 0 && j > i {
		sources = append(sources, source{comp.Content[i : j+1], "from the JSON in the orchestrator's text"})
	}
	for _, src := range sources {
		var wrapped struct {
			Subtasks []Subtask `json:"subtasks"`
		}
		var plan []Subtask
		if json.Unmarshal([]byte(src.text), &wrapped) == nil {
			plan = wrapped.Subtasks
		} else if json.Unmarshal([]byte(src.text), &plan) != nil {
			continue
		}
		var ok []Subtask
		for _, s := range plan {
			s.Title, s.Instructions = strings.TrimSpace(s.Title), strings.TrimSpace(s.Instructions)
			if s.Instructions == "" {
				s.Instructions = s.Title
			}
			if s.Instructions == "" {
				continue
			}
			if s.Title == "" {
				s.Title = firstLines(s.Instructions, 1, 60)[0]
			}
			ok = append(ok, s)
		}
		if len(ok) > maxSubtasks {
			ok = ok[:maxSubtasks]
		}
		if len(ok) > 0 {
			return ok, src.how
		}
	}
	return nil, "the orchestrator gave no usable plan; the whole task runs as one subtask"
}
