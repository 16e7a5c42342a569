package agent

import (
	"fmt"
	"strings"

	"github.com/airlock-sandbox/airlock/tools"
)

// systemPrompt tells the model what it is, what the sandbox has and which
// skills there are.
func systemPrompt(env tools.Env, skills []Skill) string {
	var b strings.Builder
	b.WriteString("You are a data agent. You solve the user's task by calling tools that run in a sandbox; " +
		"when the task is done, answer the user in plain text, without calling a tool.\n\n")
	b.WriteString(env.Describe())
	b.WriteString("\n\nWork in small steps: look at the data before you change it, check each result, and keep the files " +
		"the user should get in " + tools.OutputDir + ". Tool results are shortened: print summaries, not whole tables. " +
		"Packages cannot be installed and the network cannot be reached; use what the sandbox has.")
	if len(skills) > 0 {
		fmt.Fprintf(&b, "\n\nSkills are folders of instructions and helper scripts, read-only under %s. "+
			"Before you use one, read its SKILL.md with read_file; it says how to run its scripts.\n", SkillsDir)
		for _, s := range skills {
			fmt.Fprintf(&b, "- %s (%s): %s\n", s.Name, s.Path(), s.Description)
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// taskPrompt is the user's first message: the task and the files.
func taskPrompt(task, files string) string {
	if files == "" {
		return "Task: " + task + "\n\nThere are no input files."
	}
	return "Task: " + task + "\n\nFiles in " + tools.InputDir + " (read-only):\n" + strings.TrimRight(files, "\n")
}

// planPrompt is the orchestrator's system prompt for the split.
func planPrompt(env tools.Env, skills []Skill) string {
	return "You are the orchestrator of a data agent. Split the user's task into 2 to 5 subtasks that sub-agents will do " +
		"one after another, in the same sandbox (files they write persist), each with a small budget of steps. " +
		"Each subtask must be doable on its own given the files the earlier ones leave, and must say which files to read and write. " +
		"Call submit_plan with the subtasks; do no work yourself.\n\n" + systemPrompt(env, skills)
}

// submitPlan is the orchestrator's one tool.
var submitPlan = tools.Spec{Name: "submit_plan", Description: "Submit the subtasks, in the order they run.",
	Parameters: map[string]any{"type": "object", "required": []string{"subtasks"}, "properties": map[string]any{
		"subtasks": map[string]any{"type": "array", "minItems": 1, "maxItems": maxSubtasks, "items": map[string]any{
			"type": "object", "required": []string{"title", "instructions"}, "properties": map[string]any{
				"title":        map[string]any{"type": "string", "description": "a few words"},
				"instructions": map[string]any{"type": "string", "description": "what to do, which files to read and write"},
			}}}}}}

// subtaskPrompt is a sub-agent's first message.
func subtaskPrompt(task, files string, plan []Subtask, i int, reports []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "The user's task: %s\n\n", task)
	if files != "" {
		fmt.Fprintf(&b, "Files in %s (read-only):\n%s\n\n", tools.InputDir, strings.TrimRight(files, "\n"))
	}
	b.WriteString("The plan:\n")
	for k, s := range plan {
		fmt.Fprintf(&b, "%d. %s\n", k+1, s.Title)
	}
	if len(reports) > 0 {
		b.WriteString("\nReports of the subtasks done so far:\n")
		for k, r := range reports {
			fmt.Fprintf(&b, "%d. %s\n", k+1, r)
		}
	}
	fmt.Fprintf(&b, "\nYour subtask, %d of %d: %s\n%s\n\n", i+1, len(plan), plan[i].Title, plan[i].Instructions)
	b.WriteString("Do only this subtask. When it is done, answer with a short report (under 120 words): " +
		"what you did, what you found, and which files you wrote.")
	return b.String()
}

// composePrompt asks the orchestrator for the final answer.
func composePrompt(task string, plan []Subtask, reports []string, artifacts string) []Message {
	var b strings.Builder
	fmt.Fprintf(&b, "The user's task: %s\n\nThe subtasks and their reports:\n", task)
	for k, s := range plan {
		fmt.Fprintf(&b, "%d. %s\n   %s\n", k+1, s.Title, strings.ReplaceAll(reports[k], "\n", "\n   "))
	}
	fmt.Fprintf(&b, "\nThe files the user will get:\n%s\n\nWrite the answer to the user: what was found and which files hold it.", artifacts)
	return []Message{{Role: RoleSystem, Content: "You are the orchestrator of a data agent. The sub-agents have done the work; " +
		"compose the final answer for the user from their reports. Be brief and concrete."}, {Role: RoleUser, Content: b.String()}}
}
