package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/artifact"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/tools"
)

// Limits end a run, or a sub-agent, cleanly. Zero means no limit.
type Limits struct {
	// MaxSteps caps the model calls.
	MaxSteps int `json:"max_steps,omitempty"`
	// MaxTime caps the wall time of the whole run (not of a sub-agent).
	MaxTime time.Duration `json:"max_time_ns,omitempty"`
	// MaxTokens caps prompt and completion tokens together.
	MaxTokens int64 `json:"max_tokens,omitempty"`
	// MaxCost caps the cost in US dollars; it needs Prices.
	MaxCost float64 `json:"max_cost_usd,omitempty"`
}

// Why a run or a sub-agent ended.
const (
	StopAnswered      = "answered"
	StopMaxSteps      = "max_steps"
	StopMaxTime       = "max_time"
	StopMaxTokens     = "max_tokens"
	StopMaxCost       = "max_cost"
	StopInterrupted   = "interrupted"
	StopModelFailed   = "model_failed"
	StopSandboxFailed = "sandbox_failed"
)

// SessionInfo names the sandbox a run works in, for the transcript.
type SessionInfo struct {
	ID      string         `json:"id"`
	Backend string         `json:"backend"`
	Image   string         `json:"image"`
	Policy  sandbox.Policy `json:"policy"`
}

// Config is one run of the loop.
type Config struct {
	// Task is what the user asked.
	Task string
	// Sandbox is the session the tools run in. Run destroys it before it
	// returns, after collecting the artifacts.
	Sandbox tools.Sandbox
	// Session describes it for the transcript.
	Session SessionInfo
	// Env describes the sandbox to the model.
	Env tools.Env
	// Inputs are put read-only at /workspace/input/NAME.
	Inputs []Input
	// Skills are put read-only under SkillsDir and named to the model.
	Skills []Skill
	// Model is the endpoint and the model.
	Model ModelOptions
	// Limits bound the whole run.
	Limits Limits
	// Prices, when set, price the tokens; MaxCost needs them.
	Prices *Prices
	// Plan turns on the orchestrator: the task is split into subtasks,
	// each run by a sub-agent with SubLimits (steps and tokens).
	Plan      bool
	SubLimits Limits
	// Output receives the accepted artifacts at the end; Dir "" judges
	// them only.
	Output artifact.Destination
	// Tools bound the tools' arguments and observations.
	Tools tools.Options
	// Transcript receives the JSONL transcript; nil writes none.
	Transcript io.Writer
	// Progress receives a line per step as the run goes; nil is quiet.
	Progress io.Writer
}

// Report is what a run did and what it cost.
type Report struct {
	Stop   string `json:"stop"`
	Detail string `json:"detail"`
	Answer string `json:"answer"`
	// Steps counts the model calls.
	Steps int   `json:"steps"`
	Usage Usage `json:"usage"`
	// CostUSD is set when prices were given.
	CostUSD   *float64           `json:"cost_usd,omitempty"`
	WallMS    float64            `json:"wall_ms"`
	ModelMS   float64            `json:"model_ms"`
	SandboxMS float64            `json:"sandbox_ms"`
	Agents    []AgentReport      `json:"agents"`
	StepLog   []StepReport       `json:"step_log"`
	Artifacts []sandbox.Artifact `json:"artifacts"`
	// Session is the sandbox session's id.
	Session string `json:"session"`
}

// AgentReport is the token economics of one agent of a run: "main", or
// with Plan "orchestrator" and "subtask N".
type AgentReport struct {
	Name      string   `json:"name"`
	Title     string   `json:"title,omitempty"`
	Steps     int      `json:"steps"`
	ToolCalls int      `json:"tool_calls"`
	Usage     Usage    `json:"usage"`
	CostUSD   *float64 `json:"cost_usd,omitempty"`
	ModelMS   float64  `json:"model_ms"`
	SandboxMS float64  `json:"sandbox_ms"`
	Stop      string   `json:"stop,omitempty"`
	Report    string   `json:"report,omitempty"`
}

// StepReport is one model call and the tool calls it asked for.
type StepReport struct {
	Step      int      `json:"step"`
	Agent     string   `json:"agent"`
	Tools     []string `json:"tools,omitempty"`
	Usage     Usage    `json:"usage"`
	CostUSD   *float64 `json:"cost_usd,omitempty"`
	ModelMS   float64  `json:"model_ms"`
	SandboxMS float64  `json:"sandbox_ms"`
}

// Defaults of a run.
const (
	DefaultMaxSteps    = 30
	DefaultMaxTime     = 15 * time.Minute
	DefaultSubMaxSteps = 12
	maxCallsPerStep    = 8
	maxSameCalls       = 3
	maxImagesPerStep   = 4
	maxSubtasks        = 6
	maxReport          = 2000
	collectTimeout     = 2 * time.Minute
)

// errMaxTime is the cause of the run's context ending at MaxTime.
var errMaxTime = errors.New("the run's wall time is up")

// run is the state of one run, shared by its agents.
type run struct {
	cfg   Config
	model *model
	kit   *tools.Kit
	tr    *transcript
	red   redactor
	prog  *progress
	specs []tools.Spec
	start time.Time

	system string
	files  string // the inputs' preview

	steps     int
	usage     Usage
	cost      float64
	modelT    time.Duration
	sandboxT  time.Duration
	agents    []*agent
	stepLog   []*StepReport
	stop      string
	detail    string
	answer    string
	artifacts []sandbox.Artifact
}

// agent is one conversation of a run.
type agent struct {
	r      *run
	rep    AgentReport
	limits Limits // its own budget (steps, tokens); the run's bound it too
	msgs   []Message
	sent   int      // messages already in a request's record
	recent []string // the last calls, for spotting a loop
}

// Run runs the loop to its end: the model answers, a limit is reached,
// ctx ends, or the endpoint or the sandbox fails. Whatever the end, the
// artifacts are collected into cfg.Output and the sandbox is destroyed.
// Limits are not errors: the Report says which ended the run. The error
// is non-nil when the run could not go on: the endpoint failed (it wraps
// ErrModel), the sandbox did, or the config is wrong.
func Run(ctx context.Context, cfg Config) (rep Report, err error) {
	if cfg.Sandbox == nil {
		return rep, fmt.Errorf("agent: no sandbox: %w", sandbox.ErrInvalid)
	}
	r := &run{cfg: cfg, red: newRedactor(cfg.Model.APIKey), start: time.Now()}
	defer func() {
		if derr := cfg.Sandbox.Destroy(context.WithoutCancel(ctx)); derr != nil && err == nil && !errors.Is(derr, sandbox.ErrDestroyed) {
			err = fmt.Errorf("destroying the session: %w", derr)
		}
	}()
	if err := r.setup(); err != nil {
		return rep, err
	}
	if cfg.Limits.MaxTime > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, cfg.Limits.MaxTime, errMaxTime)
		defer cancel()
	}
	err = r.work(ctx)
	r.finish(ctx, err)
	return r.report(), r.redactErr(err)
}

// setup checks the config and opens the model, the kit and the transcript.
func (r *run) setup() error {
	c := &r.cfg
	if strings.TrimSpace(c.Task) == "" {
		return fmt.Errorf("agent: no task: %w", sandbox.ErrInvalid)
	}
	if c.Limits.MaxCost > 0 && c.Prices == nil {
		return fmt.Errorf("agent: a cost limit needs prices: %w", sandbox.ErrInvalid)
	}
	if c.Limits.MaxSteps <= 0 {
		c.Limits.MaxSteps = DefaultMaxSteps
	}
	if c.Plan && c.SubLimits.MaxSteps <= 0 {
		c.SubLimits.MaxSteps = DefaultSubMaxSteps
	}
	m, err := newModel(c.Model)
	if err != nil {
		return err
	}
	r.model = m
	r.kit = tools.NewKit(c.Sandbox, c.Env, c.Tools)
	r.specs = tools.Specs(c.Env)
	r.tr = &transcript{w: c.Transcript, red: r.red, now: time.Now}
	r.prog = &progress{w: c.Progress, red: r.red}
	r.system = systemPrompt(c.Env, c.Skills)
	return nil
}

// work puts the files in, then runs the agents.
func (r *run) work(ctx context.Context) error {
	c := r.cfg
	start := time.Now()
	inputs, err := putInputs(ctx, c.Sandbox, c.Inputs)
	if err == nil {
		err = putSkills(ctx, c.Sandbox, c.Skills)
	}
	r.sandboxT += time.Since(start)
	var skills []SkillInfo
	for _, s := range c.Skills {
		skills = append(skills, s.info())
	}
	var sub *Limits
	if c.Plan {
		sub = &c.SubLimits
	}
	r.tr.write(Record{Type: RecStart, Start: &StartInfo{Task: c.Task, Model: c.Model.Model, Endpoint: r.model.host,
		Stream: c.Model.Stream, Session: c.Session, Limits: c.Limits, Sub: sub, Prices: c.Prices, Plan: c.Plan,
		Vision: c.Env.Vision, Inputs: inputs, Skills: skills, Tools: rawJSON(r.specs), System: r.system}})
	if err != nil {
		return r.sandboxFailed(ctx, err)
	}
	files, took, err := preview(ctx, c.Sandbox, inputs)
	r.sandboxT += took
	if err != nil {
		return r.sandboxFailed(ctx, err)
	}
	r.files = files
	r.tr.write(Record{Type: RecPreview, Text: files, SandboxMS: ms(took)})
	r.prog.start(c, inputs)
	if c.Plan {
		return r.orchestrate(ctx)
	}
	a := r.newAgent("main", "", Limits{})
	a.msgs = []Message{{Role: RoleSystem, Content: r.system}, {Role: RoleUser, Content: taskPrompt(c.Task, files)}}
	answer, stop, detail, err := a.loop(ctx)
	r.stop, r.detail, r.answer = stop, detail, answer
	a.rep.Stop = stop
	return err
}

// sandboxFailed ends the run on an error of the sandbox, or on ctx.
func (r *run) sandboxFailed(ctx context.Context, err error) error {
	if stop, detail, ok := r.ctxStop(ctx); ok {
		r.stop, r.detail = stop, detail
		return nil
	}
	r.stop, r.detail = StopSandboxFailed, err.Error()
	return err
}

// ctxStop tells whether ctx ended, and how to say it.
func (r *run) ctxStop(ctx context.Context) (string, string, bool) {
	if ctx.Err() == nil {
		return "", "", false
	}
	if errors.Is(context.Cause(ctx), errMaxTime) {
		return StopMaxTime, fmt.Sprintf("reached the wall-time limit of %v", r.cfg.Limits.MaxTime), true
	}
	return StopInterrupted, "interrupted: " + context.Cause(ctx).Error(), true
}

func (r *run) newAgent(name, title string, limits Limits) *agent {
	a := &agent{r: r, rep: AgentReport{Name: name, Title: title}, limits: limits}
	r.agents = append(r.agents, a)
	return a
}

// limitReached says whether a limit of the run or of the agent keeps it
// from another model call.
func (a *agent) limitReached() (string, string) {
	r := a.r
	l := r.cfg.Limits
	switch {
	case r.steps >= l.MaxSteps:
		return StopMaxSteps, fmt.Sprintf("reached the step limit of %d model calls", l.MaxSteps)
	case l.MaxTokens > 0 && r.usage.Total() >= l.MaxTokens:
		return StopMaxTokens, fmt.Sprintf("used %s tokens, at or over the limit of %s", count(r.usage.Total()), count(l.MaxTokens))
	case l.MaxCost > 0 && r.cost >= l.MaxCost:
		return StopMaxCost, fmt.Sprintf("spent $%.4f, at or over the limit of $%.4f", r.cost, l.MaxCost)
	case a.limits.MaxSteps > 0 && a.rep.Steps >= a.limits.MaxSteps:
		return StopMaxSteps, fmt.Sprintf("reached %s's step limit of %d", a.rep.Name, a.limits.MaxSteps)
	case a.limits.MaxTokens > 0 && a.rep.Usage.Total() >= a.limits.MaxTokens:
		return StopMaxTokens, fmt.Sprintf("%s used %s tokens, at or over its limit of %s", a.rep.Name, count(a.rep.Usage.Total()), count(a.limits.MaxTokens))
	}
	return "", ""
}

// ask makes one model call for the agent and accounts for it.
func (a *agent) ask(ctx context.Context, specs []tools.Spec) (completion, *StepReport, error) {
	r := a.r
	r.steps++
	a.rep.Steps++
	step := r.steps
	r.tr.write(Record{Type: RecRequest, Agent: a.rep.Name, Step: step, MessagesFrom: a.sent, Messages: a.msgs[a.sent:]})
	a.sent = len(a.msgs)
	comp, err := r.model.complete(ctx, call{msgs: a.msgs, specs: specs})
	r.modelT += comp.Duration
	a.rep.ModelMS += ms(comp.Duration)
	if err != nil {
		return comp, nil, err
	}
	r.usage.add(comp.Usage)
	a.rep.Usage.add(comp.Usage)
	sr := StepReport{Step: step, Agent: a.rep.Name, Usage: comp.Usage, ModelMS: ms(comp.Duration)}
	if p := r.cfg.Prices; p != nil {
		c := p.Cost(comp.Usage)
		r.cost += c
		sr.CostUSD = &c
		a.rep.CostUSD = addCost(a.rep.CostUSD, c)
	}
	r.tr.write(Record{Type: RecResponse, Agent: a.rep.Name, Step: step, Content: comp.Content, ToolCalls: comp.ToolCalls,
		FinishReason: comp.FinishReason, Usage: &comp.Usage, CostUSD: sr.CostUSD, ModelMS: sr.ModelMS})
	r.stepLog = append(r.stepLog, &sr)
	return comp, &sr, nil
}

func addCost(p *float64, c float64) *float64 {
	v := c
	if p != nil {
		v += *p
	}
	return &v
}

// loop runs the agent's conversation to an answer or a stop.
func (a *agent) loop(ctx context.Context) (answer, stop, detail string, err error) {
	r := a.r
	for {
		if stop, detail := a.limitReached(); stop != "" {
			return a.lastWords(), stop, detail, nil
		}
		comp, sr, err := a.ask(ctx, r.specs)
		if err != nil {
			if stop, detail, ok := r.ctxStop(ctx); ok {
				return a.lastWords(), stop, detail, nil
			}
			return "", StopModelFailed, err.Error(), err
		}
		if len(comp.ToolCalls) == 0 {
			r.prog.answer(a, sr, comp, r)
			a.msgs = append(a.msgs, Message{Role: RoleAssistant, Content: comp.Content})
			return comp.Content, StopAnswered, "the model answered", nil
		}
		calls := comp.ToolCalls
		for i := range calls {
			if calls[i].ID == "" {
				calls[i].ID = fmt.Sprintf("call_%d_%d", sr.Step, i+1)
			}
		}
		a.msgs = append(a.msgs, Message{Role: RoleAssistant, Content: comp.Content, ToolCalls: calls})
		var images []tools.Image
		for i, tc := range calls {
			obs, took, err := a.runTool(ctx, sr.Step, i, tc)
			sr.Tools = append(sr.Tools, tc.Name)
			sr.SandboxMS += ms(took)
			if err != nil {
				if stop, detail, ok := r.ctxStop(ctx); ok {
					return a.lastWords(), stop, detail, nil
				}
				return "", StopSandboxFailed, err.Error(), err
			}
			r.prog.tool(a, sr, tc, obs, took, i == 0, r)
			a.msgs = append(a.msgs, Message{Role: RoleTool, ToolCallID: tc.ID, Content: obs.Text})
			if r.cfg.Env.Vision {
				images = append(images, obs.Images...)
			}
		}
		if len(images) > maxImagesPerStep {
			images = images[len(images)-maxImagesPerStep:]
		}
		if len(images) > 0 {
			a.msgs = append(a.msgs, withImages(fmt.Sprintf("The images from the tool calls above (%d):", len(images)), images))
		}
	}
}

// lastWords is the agent's last text, for a report when it stopped early.
func (a *agent) lastWords() string {
	for i := len(a.msgs) - 1; i >= 0; i-- {
		if m := a.msgs[i]; m.Role == RoleAssistant && strings.TrimSpace(m.Content) != "" {
			return m.Content
		}
	}
	return ""
}

// runTool runs one call, or refuses it with an error the model reads.
func (a *agent) runTool(ctx context.Context, step, i int, tc ToolCall) (tools.Observation, time.Duration, error) {
	r := a.r
	r.tr.write(Record{Type: RecToolCall, Agent: a.rep.Name, Step: step, CallID: tc.ID, Tool: tc.Name, Arguments: tc.Arguments})
	a.rep.ToolCalls++
	start := time.Now()
	obs, refused := refusal(i, tc, &a.recent)
	var err error
	if !refused {
		obs, err = r.kit.Call(ctx, tc.Name, tc.Arguments)
	}
	took := time.Since(start)
	r.sandboxT += took
	a.rep.SandboxMS += ms(took)
	if err != nil {
		return obs, took, err
	}
	rec := Record{Type: RecToolResult, Agent: a.rep.Name, Step: step, CallID: tc.ID, Tool: tc.Name,
		Observation: obs.Text, IsError: obs.IsError, SandboxMS: ms(took)}
	for _, img := range obs.Images {
		rec.Images = append(rec.Images, imageRef(img))
	}
	for _, f := range obs.Changed {
		rec.Changed = append(rec.Changed, f.Path)
	}
	r.tr.write(rec)
	return obs, took, nil
}

// refusal decides whether the loop refuses the i-th call of a step
// without running it: no tool named, too many calls in one step, or the
// same call as the last ones (a loop). recent holds the latest calls.
func refusal(i int, tc ToolCall, recent *[]string) (tools.Observation, bool) {
	if tc.Name == "" {
		return tools.Observation{Text: "error: the tool call has no tool name; the tools are " + strings.Join(tools.Names(), ", "), IsError: true}, true
	}
	if i >= maxCallsPerStep {
		return tools.Observation{Text: fmt.Sprintf("error: not run: at most %d tool calls are run a step; call it again in the next step", maxCallsPerStep), IsError: true}, true
	}
	key := callKey(tc)
	same := 0
	for k := len(*recent) - 1; k >= 0 && (*recent)[k] == key; k-- {
		same++
	}
	*recent = append(*recent, key)
	if len(*recent) > maxSameCalls {
		*recent = (*recent)[1:]
	}
	if same >= maxSameCalls-1 {
		return tools.Observation{Text: fmt.Sprintf("error: not run: the same call, with the same arguments, came %d times in a row; "+
			"its result will not change. Change the call, try another approach, or answer.", same+1), IsError: true}, true
	}
	return tools.Observation{}, false
}

// callKey identifies a call by its tool and its arguments, compacted.
func callKey(tc ToolCall) string {
	var v any
	if json.Unmarshal([]byte(tc.Arguments), &v) == nil {
		if b, err := json.Marshal(v); err == nil {
			return tc.Name + "\x00" + string(b)
		}
	}
	return tc.Name + "\x00" + tc.Arguments
}

// finish collects the artifacts and writes the end of the transcript.
func (r *run) finish(ctx context.Context, err error) {
	if r.stop == "" {
		r.stop, r.detail = StopSandboxFailed, "the run ended early"
		if err != nil {
			r.detail = err.Error()
		}
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), collectTimeout)
	defer cancel()
	start := time.Now()
	arts, cerr := r.cfg.Sandbox.Collect(cctx, r.cfg.Output)
	r.sandboxT += time.Since(start)
	r.artifacts = arts
	if cerr != nil {
		r.prog.say("could not collect the artifacts: %v", cerr)
	}
	rep := r.report()
	r.prog.summary(rep, r.cfg.Output.Dir)
	r.tr.write(Record{Type: RecEnd, Stop: rep.Stop, Detail: rep.Detail, Content: rep.Answer, Result: &rep})
}

// report puts the run's figures together.
func (r *run) report() Report {
	rep := Report{Stop: r.stop, Detail: r.red.String(r.detail), Answer: r.red.String(r.answer), Steps: r.steps, Usage: r.usage,
		WallMS: ms(time.Since(r.start)), ModelMS: ms(r.modelT), SandboxMS: ms(r.sandboxT),
		StepLog: []StepReport{}, Artifacts: r.artifacts, Session: r.cfg.Session.ID}
	for _, s := range r.stepLog {
		rep.StepLog = append(rep.StepLog, *s)
	}
	if r.cfg.Prices != nil {
		c := r.cost
		rep.CostUSD = &c
	}
	for _, a := range r.agents {
		rep.Agents = append(rep.Agents, a.rep)
	}
	if rep.Artifacts == nil {
		rep.Artifacts = []sandbox.Artifact{}
	}
	return rep
}

// redactErr removes the key from an error's text.
func (r *run) redactErr(err error) error {
	if err == nil {
		return nil
	}
	if s := r.red.String(err.Error()); s != err.Error() {
		return redactedError{msg: s, err: err}
	}
	return err
}

// redactedError is an error whose text had the key in it; Unwrap keeps
// errors.Is working.
type redactedError struct {
	msg string
	err error
}

func (e redactedError) Error() string { return e.msg }
func (e redactedError) Unwrap() error { return e.err }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
