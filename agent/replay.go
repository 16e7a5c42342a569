package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/tools"
)

// ReplayConfig is a replay of a transcript in a fresh sandbox.
type ReplayConfig struct {
	// Records are the transcript's (ReadTranscript).
	Records []Record
	// Sandbox is a fresh session of the recorded image; Replay destroys it.
	Sandbox tools.Sandbox
	// Env and Tools must match the recorded run's for the observations to.
	Env   tools.Env
	Tools tools.Options
	// Inputs name the files to put in by name, over the recorded paths.
	Inputs []Input
	// Skills replace the recorded skills; nil loads them from the recorded
	// folders.
	Skills []Skill
	// Progress receives a line per call and the differences.
	Progress io.Writer
}

// ReplayReport says how the replayed observations compare.
type ReplayReport struct {
	Calls   int        `json:"calls"`
	Same    int        `json:"same"`
	Differs []CallDiff `json:"differs"`
	// Warnings say where the replay's setting is not the recording's (an
	// input or a skill that changed).
	Warnings []string `json:"warnings"`
}

// CallDiff is a call whose observation came out otherwise.
type CallDiff struct {
	Agent     string `json:"agent"`
	Step      int    `json:"step"`
	Tool      string `json:"tool"`
	Arguments string `json:"arguments"`
	Recorded  string `json:"recorded"`
	Replayed  string `json:"replayed"`
	Diff      string `json:"diff"`
}

// Replay runs the recorded tool calls again, in their order, in a fresh
// sandbox set up as the recorded one was (the same inputs and skills),
// and compares each observation with the recorded one. The model is not
// asked anything. The sandbox is destroyed at the end.
func Replay(ctx context.Context, cfg ReplayConfig) (rep ReplayReport, err error) {
	defer func() {
		if derr := cfg.Sandbox.Destroy(context.WithoutCancel(ctx)); derr != nil && err == nil && !errors.Is(derr, sandbox.ErrDestroyed) {
			err = fmt.Errorf("destroying the session: %w", derr)
		}
	}()
	start := FirstStart(cfg.Records)
	results := map[string]Record{}
	for _, rec := range cfg.Records {
		if rec.Type == RecToolResult {
			results[rec.Agent+"\x00"+rec.CallID] = rec
		}
	}
	if start == nil {
		return rep, fmt.Errorf("the transcript has no start record: %w", sandbox.ErrInvalid)
	}
	p := &progress{w: cfg.Progress}
	inputs, warnings, err := replayInputs(start.Inputs, cfg.Inputs)
	if err != nil {
		return rep, err
	}
	rep.Warnings = warnings
	skills := cfg.Skills
	if skills == nil {
		for _, s := range start.Skills {
			got, err := loadSkill(s.Dir)
			if err != nil {
				return rep, fmt.Errorf("the recorded skill %s: %w", s.Name, err)
			}
			if got.Digest != s.SHA256 {
				rep.Warnings = append(rep.Warnings, fmt.Sprintf("skill %s in %s is not the recorded one (its files changed)", s.Name, s.Dir))
			}
			skills = append(skills, got)
		}
	}
	infos, err := putInputs(ctx, cfg.Sandbox, inputs)
	if err != nil {
		return rep, err
	}
	for i, in := range infos {
		if in.SHA256 != start.Inputs[i].SHA256 {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("input %s (%s) is not the recorded file: its SHA-256 differs", in.Name, in.Path))
		}
	}
	if err := putSkills(ctx, cfg.Sandbox, skills); err != nil {
		return rep, err
	}
	for _, w := range rep.Warnings {
		p.say("warning: %s", w)
	}
	kit := tools.NewKit(cfg.Sandbox, cfg.Env, cfg.Tools)
	recent := map[string]*[]string{}
	index := map[string]int{} // agent and step: calls so far in the step
	for _, rec := range cfg.Records {
		if rec.Type != RecToolCall {
			continue
		}
		if recent[rec.Agent] == nil {
			recent[rec.Agent] = &[]string{}
		}
		key := fmt.Sprintf("%s\x00%d", rec.Agent, rec.Step)
		i := index[key]
		index[key]++
		tc := ToolCall{ID: rec.CallID, Name: rec.Tool, Arguments: rec.Arguments}
		obs, refused := refusal(i, tc, recent[rec.Agent])
		if !refused {
			obs, err = kit.Call(ctx, tc.Name, tc.Arguments)
			if err != nil {
				return rep, err
			}
		}
		rep.Calls++
		want, ok := results[rec.Agent+"\x00"+rec.CallID]
		what, _ := describeCall(tc)
		if ok && want.Observation == obs.Text {
			rep.Same++
			p.say("step %-3d %-14s %-28s same", rec.Step, rec.Agent, clean(what))
			continue
		}
		d := CallDiff{Agent: rec.Agent, Step: rec.Step, Tool: tc.Name, Arguments: tc.Arguments, Recorded: want.Observation, Replayed: obs.Text}
		if !ok {
			d.Recorded = "(the transcript has no result of this call)"
		}
		d.Diff = lineDiff(d.Recorded, d.Replayed)
		rep.Differs = append(rep.Differs, d)
		p.say("step %-3d %-14s %-28s DIFFERS", rec.Step, rec.Agent, clean(what))
		for _, l := range strings.Split(d.Diff, "\n") {
			p.say("    %s", clean(l))
		}
	}
	if rep.Differs == nil {
		rep.Differs = []CallDiff{}
	}
	if rep.Warnings == nil {
		rep.Warnings = []string{}
	}
	p.say("airlock agent replay: %d tool calls, %d the same, %d differ", rep.Calls, rep.Same, len(rep.Differs))
	return rep, nil
}

// replayInputs pairs the recorded inputs with the files to put in.
func replayInputs(recorded []InputInfo, given []Input) ([]Input, []string, error) {
	byName := map[string]string{}
	for _, in := range given {
		byName[in.Name] = in.Path
	}
	var out []Input
	var warnings []string
	for _, r := range recorded {
		p := r.Path
		if g, ok := byName[r.Name]; ok {
			p = g
			delete(byName, r.Name)
		}
		out = append(out, Input{Path: p, Name: r.Name})
	}
	for name := range byName {
		warnings = append(warnings, fmt.Sprintf("input %s is not in the transcript; it is not put in", name))
	}
	return out, warnings, nil
}

// maxDiffCells bounds the work of one line diff.
const maxDiffCells = 4 << 20

// lineDiff writes the lines that differ between a and b, "-" for a's and
// "+" for b's, with a line of context around each change.
func lineDiff(a, b string) string {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	if len(x)*len(y) > maxDiffCells {
		return "- " + tools.Clip(a, 2000) + "\n+ " + tools.Clip(b, 2000)
	}
	// lcs[i][j] is the length of the longest common subsequence of x[i:] and y[j:].
	lcs := make([][]int32, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int32, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type line struct {
		op   byte
		text string
	}
	var ops []line
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			ops = append(ops, line{' ', x[i]})
			i++
			j++
		case j < len(y) && (i == len(x) || lcs[i][j+1] >= lcs[i+1][j]):
			ops = append(ops, line{'+', y[j]})
			j++
		default:
			ops = append(ops, line{'-', x[i]})
			i++
		}
	}
	var out []string
	lastShown := -1
	for k, o := range ops {
		near := o.op != ' '
		for d := -1; d <= 1 && !near; d++ {
			if k+d >= 0 && k+d < len(ops) && ops[k+d].op != ' ' {
				near = true
			}
		}
		if !near {
			continue
		}
		if lastShown >= 0 && k > lastShown+1 {
			out = append(out, "  …")
		}
		out = append(out, string(o.op)+" "+o.text)
		lastShown = k
	}
	return strings.Join(out, "\n")
}

// FirstStart is the start record of a transcript, or nil.
func FirstStart(recs []Record) *StartInfo {
	for _, r := range recs {
		if r.Type == RecStart && r.Start != nil {
			return r.Start
		}
	}
	return nil
}
