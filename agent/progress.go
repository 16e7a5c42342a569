package agent

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/tools"
)

// progress writes what the run does, a few lines a step, for a person at
// a terminal. Text that came from the model or the sandbox is shown with
// its control characters escaped, and without the key.
type progress struct {
	w   io.Writer
	red redactor
}

func (p *progress) say(format string, a ...any) {
	if p == nil || p.w == nil {
		return
	}
	fmt.Fprintln(p.w, p.red.String(fmt.Sprintf(format, a...)))
}

// clean escapes control characters, so that text from the model or the
// sandbox cannot drive the terminal.
func clean(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\t':
			b.WriteByte(' ')
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) || r == '\uFFFD':
			b.WriteString(strings.Trim(strconv.QuoteRune(r), "'"))
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// firstLines is up to n lines of s, each cut to width.
func firstLines(s string, n, width int) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if len(out) == n {
			if !strings.HasSuffix(out[n-1], "…") {
				out[n-1] += " …"
			}
			break
		}
		l = clean(strings.TrimRight(l, " \r"))
		if len([]rune(l)) > width {
			l = string([]rune(l)[:width]) + "…"
		}
		out = append(out, l)
	}
	return out
}

// label is the agent's prefix on a line: none for a run without a plan.
func label(a *agent) string {
	if a.rep.Name == "main" {
		return ""
	}
	return "[" + a.rep.Name + "] "
}

func (p *progress) start(c Config, inputs []InputInfo) {
	lim := fmt.Sprintf("%d steps", c.Limits.MaxSteps)
	if c.Limits.MaxTime > 0 {
		lim += fmt.Sprintf(", %v", c.Limits.MaxTime)
	}
	if c.Limits.MaxTokens > 0 {
		lim += ", " + count(c.Limits.MaxTokens) + " tokens"
	}
	if c.Limits.MaxCost > 0 {
		lim += fmt.Sprintf(", $%.2f", c.Limits.MaxCost)
	}
	p.say("airlock agent: model %s at %s; session %s (%s, image %s); %s, %s; limits: %s",
		clean(c.Model.Model), redactURL(c.Model.BaseURL), shortID(c.Session.ID), c.Session.Backend, c.Session.Image,
		plural(len(inputs), "input"), plural(len(c.Skills), "skill"), lim)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// tool writes one tool call: the tool, the code's first lines, the exit
// status, the time it took and what it changed; the first call of a step
// also says the tokens so far.
func (p *progress) tool(a *agent, sr *StepReport, tc ToolCall, obs tools.Observation, took time.Duration, first bool, r *run) {
	if p == nil || p.w == nil {
		return
	}
	what, body := describeCall(tc)
	status := "ok"
	if obs.IsError {
		status = firstLines(obs.Text, 1, 48)[0]
	}
	tokens := ""
	if first {
		tokens = "tokens " + count(r.usage.Total())
	}
	p.say("%s", strings.TrimRight(fmt.Sprintf("%sstep %-3d %-28s %-22s %6s  %s", label(a), sr.Step, clean(what), status, secs(took), tokens), " "))
	for _, l := range body {
		p.say("%s          %s", label(a), l)
	}
	if len(obs.Changed) > 0 {
		var names []string
		for _, f := range obs.Changed {
			names = append(names, fmt.Sprintf("%s (%s)", clean(f.Path), tools.Bytes(f.Size)))
		}
		p.say("%s          new: %s", label(a), strings.Join(names, ", "))
	}
}

// describeCall names a call and picks the lines worth showing of it.
func describeCall(tc ToolCall) (string, []string) {
	var args struct {
		Language, Code, Command, Path string
	}
	_ = json.Unmarshal([]byte(tc.Arguments), &args)
	switch tc.Name {
	case tools.RunCode:
		lang := args.Language
		if lang == "" {
			lang = "python"
		}
		return tc.Name + " " + lang, firstLines(args.Code, 3, 100)
	case tools.RunCommand:
		return tc.Name, firstLines(args.Command, 2, 100)
	case tools.WriteFile, tools.ReadFile, tools.ListFiles:
		if args.Path != "" {
			return tc.Name + " " + args.Path, nil
		}
	}
	if tc.Name == "" {
		return "(no tool named)", nil
	}
	return tc.Name, nil
}

// plan writes the orchestrator's subtasks.
func (p *progress) plan(sr *StepReport, plan []Subtask, how string, r *run) {
	p.say("[orchestrator] step %-3d %-28s %-22s %6s  tokens %s", sr.Step, "plan", fmt.Sprintf("%d subtasks", len(plan)), "", count(r.usage.Total()))
	p.say("[orchestrator]          %s", how)
	for i, s := range plan {
		p.say("[orchestrator]          %d. %s", i+1, strings.Join(firstLines(s.Title, 1, 90), ""))
	}
}

func (p *progress) answer(a *agent, sr *StepReport, comp completion, r *run) {
	p.say("%sstep %-3d %-28s %-22s %6s  tokens %s", label(a), sr.Step, "answer", fmt.Sprintf("%d characters", len([]rune(comp.Content))),
		"", count(r.usage.Total()))
}

// summary writes the run's end and its token economics.
func (p *progress) summary(rep Report, outDir string) {
	if p == nil || p.w == nil {
		return
	}
	p.say("airlock agent: %s after %d steps in %s (model %s, sandbox %s): %s", stopWord(rep.Stop), rep.Steps,
		secs(msDur(rep.WallMS)), secs(msDur(rep.ModelMS)), secs(msDur(rep.SandboxMS)), rep.Detail)
	p.say("tokens: %s in all: prompt %s (%s cached), completion %s%s", count(rep.Usage.Total()), count(rep.Usage.Prompt),
		count(rep.Usage.Cached), count(rep.Usage.Completion), costText(rep.CostUSD))
	if len(rep.StepLog) > 0 {
		head := fmt.Sprintf("  step  %-14s %-30s %9s %9s %10s %8s %8s", "agent", "tools", "prompt", "cached", "completion", "model", "sandbox")
		if rep.CostUSD != nil {
			head += fmt.Sprintf(" %9s", "cost")
		}
		p.say("%s", head)
		for _, s := range rep.StepLog {
			names := strings.Join(s.Tools, ",")
			if names == "" {
				names = "(answer)"
			}
			if len(names) > 30 {
				names = names[:29] + "…"
			}
			line := fmt.Sprintf("  %4d  %-14s %-30s %9s %9s %10s %8s %8s", s.Step, s.Agent, names, count(s.Usage.Prompt), count(s.Usage.Cached),
				count(s.Usage.Completion), secs(msDur(s.ModelMS)), secs(msDur(s.SandboxMS)))
			if s.CostUSD != nil {
				line += fmt.Sprintf(" %9s", fmt.Sprintf("$%.4f", *s.CostUSD))
			}
			p.say("%s", line)
		}
	}
	if len(rep.Agents) > 1 {
		p.say("agents:")
		for _, a := range rep.Agents {
			name := a.Name
			if a.Title != "" {
				name += ": " + a.Title
			}
			if len([]rune(name)) > 40 {
				name = string([]rune(name)[:39]) + "…"
			}
			stop := ""
			if a.Stop != "" {
				stop = "  " + stopWord(a.Stop)
			}
			p.say("  %-40s %3d steps %10s tokens%s%s", clean(name), a.Steps, count(a.Usage.Total()), costText(a.CostUSD), stop)
		}
	}
	var kept, refused []string
	for _, a := range rep.Artifacts {
		if a.Verdict == sandbox.VerdictRejected {
			refused = append(refused, fmt.Sprintf("%s (%s)", clean(a.Path), clean(a.Reason)))
		} else {
			kept = append(kept, clean(a.Path))
		}
	}
	where := "judged only (no --output)"
	if outDir != "" {
		where = "in " + outDir
	}
	if len(kept) > 0 {
		p.say("artifacts %s: %s", where, strings.Join(kept, ", "))
	}
	if len(refused) > 0 {
		p.say("artifacts rejected: %s", strings.Join(refused, "; "))
	}
}

func stopWord(stop string) string {
	switch stop {
	case StopAnswered:
		return "answered"
	case StopMaxSteps:
		return "stopped at the step limit"
	case StopMaxTime:
		return "stopped at the time limit"
	case StopMaxTokens:
		return "stopped at the token limit"
	case StopMaxCost:
		return "stopped at the cost limit"
	case StopInterrupted:
		return "interrupted"
	case StopModelFailed:
		return "failed: the model endpoint"
	}
	return "failed: the sandbox"
}

func costText(c *float64) string {
	if c == nil {
		return ""
	}
	return fmt.Sprintf("; cost $%.4f", *c)
}

// count writes a number with thousands separators.
func count(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

func msDur(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }
