package excelreport_test

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
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

const key = "sk-scenario-7Hq2Lm9Xv4Rt8Wz1"

// truth is what make_workbook.py planted.
type truth struct {
	Outliers   []string `json:"outliers"`
	Duplicates []string `json:"duplicates"`
	Missing    []struct {
		OrderID string `json:"order_id"`
		Column  string `json:"column"`
	} `json:"missing"`
	Negative   []string `json:"negative_quantity"`
	LevelShift struct {
		Region, Month string
	} `json:"level_shift"`
	Rows int `json:"rows"`
}

// workbook runs the generator in a sandbox and returns the workbook's
// path and what it planted.
func workbook(t *testing.T, m *session.Manager) (string, truth) {
	t.Helper()
	script, err := os.ReadFile("make_workbook.py")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd, err := session.CodeCommand("python", string(script))
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.RunOnce(context.Background(), session.OneShot{Create: session.CreateOptions{Image: testsession.Image},
		Process: sandbox.ProcessSpec{Cmd: cmd, Timeout: sandbox.Duration(2 * time.Minute)}, Output: artifact.Destination{Dir: dir}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("make_workbook.py: %v, exit %d: %s", err, res.ExitCode, res.Stderr)
	}
	var tr truth
	b, err := os.ReadFile(filepath.Join(dir, "truth.json"))
	if err == nil {
		err = json.Unmarshal(b, &tr)
	}
	if err != nil || tr.Rows < 3000 || len(tr.Outliers) == 0 || tr.LevelShift.Region == "" {
		t.Fatalf("truth.json: %v %+v", err, tr)
	}
	return filepath.Join(dir, "sales.xlsx"), tr
}

// step is one reply of the scripted model and what it expects of the
// observations it answers.
type step struct {
	reply agenttest.Reply
	// check sees the tool results of the step before, by call id.
	check func(t *testing.T, results map[string]string)
}

func call(id, name string, args map[string]any) agenttest.ToolCall {
	b, _ := json.Marshal(args)
	return agenttest.ToolCall{ID: id, Name: name, Arguments: string(b)}
}

func calls(c ...agenttest.ToolCall) agenttest.Reply { return agenttest.Reply{ToolCalls: c} }

func code(id, src string) agenttest.ToolCall {
	return call(id, tools.RunCode, map[string]any{"language": "python", "code": src, "timeout_seconds": 90})
}

func command(id, cmd string) agenttest.ToolCall {
	return call(id, tools.RunCommand, map[string]any{"command": cmd, "timeout_seconds": 90})
}

// wants returns a check that each call's observation holds the strings.
func wants(w map[string][]string) func(*testing.T, map[string]string) {
	return func(t *testing.T, results map[string]string) {
		t.Helper()
		for id, subs := range w {
			got, ok := results[id]
			if !ok {
				t.Errorf("no result of call %s", id)
				continue
			}
			for _, s := range subs {
				if !strings.Contains(got, s) {
					t.Errorf("the observation of %s lacks %q:\n%s", id, s, got)
				}
			}
		}
	}
}

const edaCommand = "python3 /workspace/input/skills/spreadsheet-eda/eda.py /workspace/input/sales.xlsx --sheet Orders --csv /tmp/eda.csv --json /tmp/eda.json"
const deckCommand = "node /workspace/input/skills/pptx/build_deck.js /tmp/outline.json /workspace/output/report.pptx"

// The steps of the work, shared by the plain run and the planned one.
var (
	lookAround = step{reply: calls(call("ls", tools.ListFiles, map[string]any{}),
		call("skill", tools.ReadFile, map[string]any{"path": "/workspace/input/skills/spreadsheet-eda/SKILL.md"}),
		command("env", "printenv | sort"))}
	profile = step{reply: calls(command("eda", edaCommand)), check: wants(map[string][]string{
		"ls":    {"sales.xlsx", "skills/pptx/build_deck.js"},
		"skill": {"eda.py"},
		"env":   {"HOME=/tmp"}})}
	load = step{reply: calls(code("load", cellLoad)), check: wants(map[string][]string{
		"eda": {"exit 0", "sheet Orders", "level_shift", "wrote 18 findings to /tmp/eda.csv"}})}
	find = step{reply: calls(code("anoms", cellAnomalies)), check: wants(map[string][]string{
		"load": {", 8)\n", "missing        6", "result:"}})}
	charts = step{reply: calls(code("charts", cellCharts)), check: wants(map[string][]string{
		"anoms": {"negative_quantity    2", "level_shift          1", "new or changed in /workspace/output: anomalies.csv"}})}
	readDeckSkill = step{reply: calls(call("pptx", tools.ReadFile, map[string]any{"path": "/workspace/input/skills/pptx/SKILL.md"}), code("outline", cellOutline)),
		check: wants(map[string][]string{"charts": {"level_shift.png", "[image 1: image/png ", "outliers.png ("}})}
	deck = step{reply: calls(command("deck", deckCommand)), check: wants(map[string][]string{
		"pptx": {"build_deck.js"}, "outline": {"7 slides in /tmp/outline.json"}})}
	review = step{reply: calls(call("arts", tools.ListArtifacts, map[string]any{})), check: wants(map[string][]string{
		"deck": {"exit 0", "wrote /workspace/output/report.pptx: 7 slides, 5 images"}})}
	answer = step{reply: agenttest.Reply{Content: "I found five kinds of anomalies in the Orders sheet: 3 outliers (quantities of 480 to 900, " +
		"60 to 112 times the median order), 4 orders entered twice, 6 missing values, 2 negative quantities, and a sudden drop of " +
		"West's monthly revenue from July 2024 on. anomalies.csv lists each one; report.pptx has a slide per kind with its chart and a summary."},
		check: wants(map[string][]string{"arts": {"anomalies.csv", "report.pptx", "accepted"}})}
)

// scripted serves steps in order, the step chosen by how many answers the
// conversation holds, so that each request gets the reply its place asks.
func scripted(t *testing.T, steps []step) func(agenttest.Request) agenttest.Reply {
	return func(req agenttest.Request) agenttest.Reply {
		k, results := req.Turn()
		for _, obs := range results {
			if strings.Contains(obs, key) || strings.Contains(obs, "OPENAI") {
				t.Errorf("an observation holds the key or the endpoint's settings: %s", obs)
			}
		}
		if k >= len(steps) {
			t.Errorf("request with %d answers: the script has %d steps", k, len(steps))
			return agenttest.Reply{Content: "the script is over"}
		}
		if k > 0 && steps[k].check != nil {
			steps[k].check(t, results)
		}
		return steps[k].reply
	}
}

// scenario runs the loop through a real python sandbox with the repo's
// skills against a scripted model, and checks what it leaves.
func scenario(t *testing.T, plan, stream bool, script func(agenttest.Request) agenttest.Reply) agent.Report {
	m := testsession.Manager(t, nil)
	xlsx, tr := workbook(t, m)
	skills, err := agent.LoadSkills("../../skills")
	if err != nil {
		t.Fatal(err)
	}
	model := agenttest.New(t, key, func(_ int, req agenttest.Request) agenttest.Reply { return script(req) })
	s := testsession.Python(t, m, sandbox.Policy{Limits: sandbox.Limits{Timeout: sandbox.Duration(2 * time.Minute), MemoryBytes: 1 << 30}})
	out := t.TempDir()
	var transcript, progress testenv.Buffer
	rep, err := agent.Run(context.Background(), agent.Config{
		Task: "Find anomalies in this table and make a short PowerPoint deck about them", Sandbox: tools.Local(s),
		Session: agent.SessionInfo{ID: s.ID(), Backend: "native", Image: testsession.Image, Policy: s.Policy()},
		Env:     tools.Env{Image: testsession.Image, About: "python3 with pandas, matplotlib, openpyxl; node with pptxgenjs", Limits: s.Policy().Limits},
		Inputs:  []agent.Input{{Path: xlsx, Name: "sales.xlsx"}}, Skills: skills,
		Model:  agent.ModelOptions{BaseURL: model.URL, APIKey: key, Model: "scripted-analyst", Stream: stream},
		Limits: agent.Limits{MaxSteps: 20, MaxTime: 10 * time.Minute}, Plan: plan, SubLimits: agent.Limits{MaxSteps: 8},
		Prices: &agent.Prices{Input: 0.15, Output: 0.60},
		Output: artifact.Destination{Dir: out}, Transcript: &transcript, Progress: &progress})
	t.Logf("progress:\n%s", progress.String())
	if err != nil || rep.Stop != agent.StopAnswered {
		t.Fatalf("the run: %v, stop %s: %s", err, rep.Stop, rep.Detail)
	}
	if n := len(m.List("")); n != 0 {
		t.Errorf("%d sessions alive after the run", n)
	}
	checkDeck(t, filepath.Join(out, "report.pptx"))
	checkCSV(t, filepath.Join(out, "anomalies.csv"), tr)
	for _, name := range []string{"outliers", "duplicates", "missing", "negative", "level_shift"} {
		f, err := os.Open(filepath.Join(out, name+".png"))
		if err != nil {
			t.Error(err)
			continue
		}
		cfg, err := png.DecodeConfig(f)
		f.Close()
		if err != nil || cfg.Width < 600 {
			t.Errorf("%s.png: %v, %+v", name, err, cfg)
		}
	}
	checkTranscript(t, transcript.String(), rep)
	b, _ := json.Marshal(rep)
	for what, text := range map[string]string{"transcript": transcript.String(), "progress": progress.String(), "report": string(b)} {
		if strings.Contains(text, key) {
			t.Errorf("the key is in the %s", what)
		}
	}
	checkNoKey(t, out)
	if rep.CostUSD == nil || *rep.CostUSD <= 0 {
		t.Errorf("no cost in the report: %v", rep.CostUSD)
	}
	return rep
}

// TestScenario: the plain run, streamed.
func TestScenario(t *testing.T) {
	steps := []step{lookAround, profile, load, find, charts, readDeckSkill, deck, review, answer}
	rep := scenario(t, false, true, scripted(t, steps))
	if rep.Steps != len(steps) {
		t.Errorf("%d steps, want %d", rep.Steps, len(steps))
	}
}

// TestScenarioPlan: the same work with --plan, not streamed: the
// orchestrator's plan of three subtasks, a sub-agent each, and the
// composed answer.
func TestScenarioPlan(t *testing.T) {
	plan := `{"subtasks": [
 {"title": "Find the anomalies", "instructions": "Profile /workspace/input/sales.xlsx with the spreadsheet-eda skill, check its leads with pandas and save every anomaly to /workspace/output/anomalies.csv."},
 {"title": "Chart them", "instructions": "Draw one PNG chart per kind of anomaly into /workspace/output."},
 {"title": "Build the deck", "instructions": "Build /workspace/output/report.pptx with the pptx skill: a title, a slide per kind with its chart, a summary."}]}`
	reportOf := map[int]string{
		1: "Profiled the Orders sheet and saved 16 anomalies to anomalies.csv: 3 outliers, 4 duplicated orders, 6 missing values, 2 negative quantities, 1 level shift (West from 2024-07).",
		2: "Drew outliers.png, duplicates.png, missing.png, negative.png and level_shift.png in /workspace/output.",
		3: "Built report.pptx: 7 slides, 5 charts.",
	}
	subSteps := map[int][]step{
		1: {lookAround, profile, load, find, {reply: agenttest.Reply{Content: reportOf[1]}, check: charts.check}},
		2: {{reply: calls(code("load", cellLoad+"\nanoms = pd.read_csv('/workspace/output/anomalies.csv')\nmed = orders.quantity.median()"))},
			{reply: calls(code("charts", cellCharts)), check: func(t *testing.T, r map[string]string) {
				wants(map[string][]string{"load": {", 8)\n"}})(t, r)
			}},
			{reply: agenttest.Reply{Content: reportOf[2]}, check: readDeckSkill.check}},
		3: {{reply: calls(call("pptx", tools.ReadFile, map[string]any{"path": "/workspace/input/skills/pptx/SKILL.md"}),
			code("outline", "import pandas as pd\nout = '/workspace/output/'\norders = pd.read_excel('/workspace/input/sales.xlsx', sheet_name='Orders')\n"+
				"anoms = pd.read_csv(out + 'anomalies.csv')\n"+cellOutline))}, deck, review, {reply: agenttest.Reply{Content: reportOf[3]}, check: answer.check}},
	}
	scripts := map[int]func(agenttest.Request) agenttest.Reply{}
	for i, s := range subSteps {
		scripts[i] = scripted(t, s)
	}
	var mu sync.Mutex
	composed := false
	rep := scenario(t, true, false, func(req agenttest.Request) agenttest.Reply {
		user := ""
		if len(req.Messages) > 1 {
			user = req.Messages[1].Content
		}
		switch {
		case len(req.Tools) == 1 && req.Tools[0] == "submit_plan":
			if !strings.Contains(user, "sheet 'Orders'") || !strings.Contains(req.Messages[0].Content, "spreadsheet-eda") {
				t.Errorf("the orchestrator does not see the workbook's first rows and the skills:\n%s", user)
			}
			return calls(agenttest.ToolCall{ID: "plan", Name: "submit_plan", Arguments: plan})
		case strings.Contains(user, "The subtasks and their reports"):
			mu.Lock()
			composed = true
			mu.Unlock()
			for _, r := range reportOf {
				if !strings.Contains(user, r) {
					t.Errorf("the compose request lacks the report %q", r)
				}
			}
			if strings.Contains(user, "sheet Orders: 3953 rows") {
				t.Error("the orchestrator sees a sub-agent's tool output")
			}
			return answer.reply
		}
		for i := 1; i <= 3; i++ {
			if strings.Contains(user, fmt.Sprintf("Your subtask, %d of 3", i)) {
				return scripts[i](req)
			}
		}
		t.Errorf("a request the script does not know: %.300s", user)
		return agenttest.Reply{Content: "?"}
	})
	if !composed {
		t.Error("the orchestrator composed no answer")
	}
	if len(rep.Agents) != 4 || rep.Agents[0].Name != "orchestrator" || rep.Agents[0].Steps != 2 {
		t.Fatalf("agents: %+v", rep.Agents)
	}
	var sum agent.Usage
	for i, a := range rep.Agents {
		if a.Usage.Prompt == 0 || a.CostUSD == nil || (i > 0 && a.Stop != agent.StopAnswered) {
			t.Errorf("agent %s: %+v", a.Name, a)
		}
		sum.Prompt += a.Usage.Prompt
		sum.Completion += a.Usage.Completion
		sum.Cached += a.Usage.Cached
	}
	if sum != rep.Usage {
		t.Errorf("the agents' tokens add up to %+v, the run's are %+v", sum, rep.Usage)
	}
}

// checkDeck opens the deck as an OOXML package: its content types, the
// presentation's slide list, each slide, and the charts its slides show.
func checkDeck(t *testing.T, path string) {
	t.Helper()
	z, err := zip.OpenReader(path)
	if err != nil {
		t.Fatalf("report.pptx is not a zip package: %v", err)
	}
	defer z.Close()
	files := map[string][]byte{}
	for _, f := range z.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		files[f.Name] = b
	}
	if !bytes.Contains(files["[Content_Types].xml"], []byte("application/vnd.openxmlformats-officedocument.presentationml.presentation.main+xml")) {
		t.Errorf("[Content_Types].xml does not declare a presentation")
	}
	var pres struct {
		Slides []struct {
			RID string `xml:"http://schemas.openxmlformats.org/officeDocument/2006/relationships id,attr"`
		} `xml:"sldIdLst>sldId"`
	}
	if err := xml.Unmarshal(files["ppt/presentation.xml"], &pres); err != nil || len(pres.Slides) != 7 {
		t.Fatalf("ppt/presentation.xml: %v, %d slides, want 7", err, len(pres.Slides))
	}
	titles := []string{"Sales 2024: anomalies", "Outliers", "Duplicated orders", "Missing values", "Negative quantities", "Level shift", "Summary"}
	text := regexp.MustCompile(`<a:t>([^<]*)</a:t>`)
	images := 0
	for i, want := range titles {
		slide := files[fmt.Sprintf("ppt/slides/slide%d.xml", i+1)]
		if slide == nil {
			t.Errorf("slide %d is missing", i+1)
			continue
		}
		var texts []string
		for _, m := range text.FindAllSubmatch(slide, -1) {
			texts = append(texts, string(m[1]))
		}
		if len(texts) == 0 || texts[0] != want {
			t.Errorf("slide %d's first text is %q, want %q", i+1, texts, want)
		}
		rels := string(files[fmt.Sprintf("ppt/slides/_rels/slide%d.xml.rels", i+1)])
		for _, m := range regexp.MustCompile(`Target="\.\./media/([^"]+)"`).FindAllStringSubmatch(rels, -1) {
			media := files["ppt/media/"+m[1]]
			if _, err := png.DecodeConfig(bytes.NewReader(media)); err != nil {
				t.Errorf("slide %d's image %s: %v", i+1, m[1], err)
			}
			images++
		}
		if hasChart := i >= 1 && i <= 5; hasChart != strings.Contains(rels, "/image") {
			t.Errorf("slide %d: image relationship %v, want %v", i+1, !hasChart, hasChart)
		}
	}
	if images != 5 {
		t.Errorf("the deck shows %d images, want 5", images)
	}
}

// checkCSV finds every planted anomaly in anomalies.csv.
func checkCSV(t *testing.T, path string, tr truth) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil || len(rows) < 2 || strings.Join(rows[0], ",") != "kind,order_id,column,value,detail" {
		t.Fatalf("anomalies.csv: %v, header %v", err, rows[:min(1, len(rows))])
	}
	have := map[string]bool{}
	for _, r := range rows[1:] {
		have[r[0]+"/"+r[1]] = true
		have[r[0]+"/"+r[1]+"/"+r[2]] = true
		have[r[0]+"/"+r[1]+"/"+r[2]+"/"+r[3]] = true
	}
	var missing []string
	need := func(k string) {
		if !have[k] {
			missing = append(missing, k)
		}
	}
	for _, id := range tr.Outliers {
		need("outlier/" + id)
	}
	for _, id := range tr.Duplicates {
		need("duplicate/" + id)
	}
	for _, m := range tr.Missing {
		need("missing/" + m.OrderID + "/" + m.Column)
	}
	for _, id := range tr.Negative {
		need("negative_quantity/" + id)
	}
	need("level_shift/" + tr.LevelShift.Region + "/revenue/" + tr.LevelShift.Month)
	if len(missing) > 0 {
		t.Errorf("anomalies.csv lacks planted anomalies %v; it holds %v", missing, rows)
	}
	if n, planted := len(rows)-1, len(tr.Outliers)+len(tr.Duplicates)+len(tr.Missing)+len(tr.Negative)+1; n != planted {
		t.Errorf("anomalies.csv has %d rows; %d anomalies were planted", n, planted)
	}
}

// checkTranscript: every step is recorded with its request, response and
// tokens, every tool call with its result, and the totals match.
func checkTranscript(t *testing.T, text string, rep agent.Report) {
	t.Helper()
	recs, err := agent.ReadTranscript(strings.NewReader(text))
	if err != nil {
		t.Fatalf("the transcript does not parse: %v", err)
	}
	kinds := map[string]int{}
	var sum agent.Usage
	callIDs, resultIDs := map[string]bool{}, map[string]bool{}
	for _, r := range recs {
		kinds[r.Type]++
		switch r.Type {
		case agent.RecResponse:
			if r.Usage == nil || r.Usage.Prompt == 0 || r.Usage.Completion == 0 || r.ModelMS <= 0 || r.CostUSD == nil {
				t.Errorf("step %d's response lacks its tokens, time or cost: %+v", r.Step, r)
				continue
			}
			sum.Prompt += r.Usage.Prompt
			sum.Completion += r.Usage.Completion
			sum.Cached += r.Usage.Cached
		case agent.RecToolCall:
			callIDs[r.Agent+r.CallID] = true
		case agent.RecToolResult:
			resultIDs[r.Agent+r.CallID] = true
			if r.Observation == "" {
				t.Errorf("tool result %s has no observation", r.CallID)
			}
		}
	}
	if kinds[agent.RecRequest] != rep.Steps || kinds[agent.RecResponse] != rep.Steps || kinds[agent.RecStart] != 1 || kinds[agent.RecEnd] != 1 {
		t.Errorf("the transcript's records %v do not match %d steps", kinds, rep.Steps)
	}
	if len(callIDs) == 0 || len(callIDs) != len(resultIDs) {
		t.Errorf("%d tool calls recorded, %d results", len(callIDs), len(resultIDs))
	}
	if sum != rep.Usage || sum.Cached == 0 {
		t.Errorf("the transcript's tokens add up to %+v, the report's are %+v", sum, rep.Usage)
	}
}

// checkNoKey looks for the key in every file of the output folder,
// inside zip packages too.
func checkNoKey(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(key)) {
			t.Errorf("the key is in %s", p)
		}
		if z, err := zip.NewReader(bytes.NewReader(b), int64(len(b))); err == nil {
			for _, f := range z.File {
				rc, err := f.Open()
				if err != nil {
					return err
				}
				c, _ := io.ReadAll(rc)
				rc.Close()
				if bytes.Contains(c, []byte(key)) {
					t.Errorf("the key is in %s, in %s", p, f.Name)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}
