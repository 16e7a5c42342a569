package tools

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	_ "image/jpeg" // image.DecodeConfig reads JPEG sizes
	_ "image/png"  // and PNG sizes
	"io"
	"io/fs"
	"net/http"
	"path"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// Tool names.
const (
	RunCode       = "run_code"
	RunCommand    = "run_command"
	WriteFile     = "write_file"
	ReadFile      = "read_file"
	ListFiles     = "list_files"
	ListArtifacts = "list_artifacts"
)

// Folders of the sandbox the tools name.
const (
	InputDir  = "/workspace/input"
	OutputDir = "/workspace/output"
	TmpDir    = "/tmp"
)

// Env describes the sandbox to a model, for the tools' descriptions.
type Env struct {
	// Image names the image; About says what it holds (for a built image,
	// its definition's description).
	Image, About string
	// Limits are the session's normalized limits.
	Limits sandbox.Limits
	// Network lists the hosts the sandbox may reach; none means no network.
	Network []string
	// Vision: images that code shows go back to the model as images;
	// otherwise as a short description.
	Vision bool
}

// Describe is a paragraph about the sandbox: what it has, what it
// refuses. The tools' descriptions and the agent's system prompt use it.
func (e Env) Describe() string {
	l := e.Limits
	about := e.About
	if about == "" {
		about = "the host's own programs, read-only"
	}
	net := "No network at all (no DNS, no pip or npm install)"
	if len(e.Network) > 0 {
		net = "Network only to " + strings.Join(e.Network, ", ") + " through a proxy (HTTP_PROXY is set); nothing else"
	}
	return fmt.Sprintf("The sandbox is an isolated Linux box (image %s: %s). "+
		"User 1000, working folder /workspace, HOME=/tmp; the system is read-only. "+
		"%s holds the given files, read-only. Write results to %s: when the session ends its files pass an artifact filter "+
		"(csv, tsv, json, txt, md, png, jpg, svg, pdf, html, xlsx, docx, pptx, parquet, zip and similar are allowed; "+
		"CSV formula cells are neutralised, scripts removed from HTML and SVG; links, hidden files, executables and Office macros are refused) "+
		"and what passes goes to the user. %s is scratch space. %s. "+
		"Each call may run %v; memory %s, %g CPU, %d processes, %s of disk in all; programs written to disk cannot be executed.",
		e.Image, about, InputDir, OutputDir, TmpDir, net,
		time.Duration(l.Timeout), sandbox.FormatSize(l.MemoryBytes), l.CPUs, l.Pids, sandbox.FormatSize(l.DiskBytes))
}

// Spec is one tool as offered to a model.
type Spec struct {
	Name        string
	Description string
	// Parameters is the JSON schema of the arguments object.
	Parameters map[string]any
}

func object(props map[string]any, required ...string) map[string]any {
	o := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		o["required"] = required
	}
	return o
}

func str(desc string) map[string]any { return map[string]any{"type": "string", "description": desc} }

// Specs lists the tools, described for env.
func Specs(env Env) []Spec {
	timeout := map[string]any{"type": "number", "description": fmt.Sprintf("seconds this call may run; default %v", time.Duration(env.Limits.Timeout))}
	images := "Images (matplotlib figures, PNG results) come back as images."
	if !env.Vision {
		images = "Images (matplotlib figures) are described, not shown: save them to /workspace/output."
	}
	return []Spec{
		{RunCode, "Run code in a stateful interpreter: variables, imports and functions persist between calls of one language. " +
			"python runs in an IPython-like kernel (the last expression's value is returned); javascript in Node; bash in one shell. " +
			images + " Output is shortened to its head and tail; errors come with the last frames of the traceback.",
			object(map[string]any{
				"language":        map[string]any{"type": "string", "enum": []string{"python", "javascript", "bash"}, "description": "default python"},
				"code":            str("the code to run"),
				"timeout_seconds": timeout,
			}, "code")},
		{RunCommand, "Run a shell command (bash -c) to its end in /workspace and get its exit status, stdout and stderr " +
			"(shortened to head and tail). Each command is a new process; whatever it leaves running is killed when it ends.",
			object(map[string]any{"command": str("the shell command"), "timeout_seconds": timeout}, "command")},
		{WriteFile, "Write a text file, creating its folders. Only " + OutputDir + " (results for the user) and " + TmpDir + " are writable.",
			object(map[string]any{"path": str("absolute, or relative to /workspace, e.g. output/notes.md"), "content": str("the whole file")}, "path", "content")},
		{ReadFile, fmt.Sprintf("Read a file of %s, %s or %s (a skill's SKILL.md, a result). Text comes back up to %s a call; "+
			"pass offset to read on. Images come back as images where the model takes them.", InputDir, OutputDir, TmpDir, Bytes(DefaultReadCap)),
			object(map[string]any{"path": str("absolute, or relative to /workspace"), "offset": map[string]any{"type": "integer", "description": "byte to start at; default 0"}}, "path")},
		{ListFiles, "List the files under a folder with their sizes: by default the inputs (" + InputDir + ") and the results (" + OutputDir + ").",
			object(map[string]any{"path": str("a folder; default both " + InputDir + " and " + OutputDir)})},
		{ListArtifacts, "Run " + OutputDir + " through the artifact filter without ending the session and list each file's verdict " +
			"(accepted, sanitized or rejected, with the reason): what the user will get.", object(map[string]any{})},
	}
}

// Observation is what a tool call gives back to the model.
type Observation struct {
	// Text is the observation, kept short.
	Text string
	// Images are the images the call produced (code results, a PNG read).
	Images []Image
	// IsError: the call failed (bad arguments, the tool could not run),
	// or the code or command did (an exception, a non-zero exit, a
	// timeout).
	IsError bool
	// Changed lists the files of /workspace/output that the call created
	// or changed, by path below the folder.
	Changed []sandbox.FileInfo
}

// Image is an image a call produced.
type Image struct {
	MIME          string
	Data          []byte
	Width, Height int
}

// Describe is a short line about the image.
func (i Image) Describe() string {
	if i.Width > 0 {
		return fmt.Sprintf("%s %d×%d, %s", i.MIME, i.Width, i.Height, Bytes(int64(len(i.Data))))
	}
	return fmt.Sprintf("%s, %s", i.MIME, Bytes(int64(len(i.Data))))
}

// Defaults of Options.
const (
	DefaultMaxArgs   = 512 << 10
	DefaultReadCap   = 32 << 10
	DefaultOutputCap = 6 << 10
	DefaultMaxImage  = 4 << 20
	maxListed        = 300
)

// Options bound what a Kit takes and gives.
type Options struct {
	// MaxArgs caps a call's arguments in bytes; default 512 KiB.
	MaxArgs int
	// ReadCap caps the text read_file returns a call; default 32 KiB.
	ReadCap int
	// OutputCap is the budget of one stream's text (head and tail) in an
	// observation; default 6 KiB.
	OutputCap int
	// MaxTimeout bounds the timeout a call may ask for; default the
	// session's timeout (a call may ask for less, not more).
	MaxTimeout time.Duration
}

// Kit runs the tools against one sandbox. Calls are serialized by the
// caller; a Kit remembers the output folder between calls to say what
// changed.
type Kit struct {
	sb   Sandbox
	env  Env
	opts Options
	seen map[string]sandbox.FileInfo // /workspace/output at the end of the last call
}

// NewKit returns a Kit for sb.
func NewKit(sb Sandbox, env Env, opts Options) *Kit {
	if opts.MaxArgs <= 0 {
		opts.MaxArgs = DefaultMaxArgs
	}
	if opts.ReadCap <= 0 {
		opts.ReadCap = DefaultReadCap
	}
	if opts.OutputCap <= 0 {
		opts.OutputCap = DefaultOutputCap
	}
	if opts.MaxTimeout <= 0 {
		opts.MaxTimeout = time.Duration(env.Limits.Timeout)
	}
	return &Kit{sb: sb, env: env, opts: opts, seen: map[string]sandbox.FileInfo{}}
}

// Sandbox is the kit's sandbox.
func (k *Kit) Sandbox() Sandbox { return k.sb }

// Env is the kit's description of its sandbox.
func (k *Kit) Env() Env { return k.env }

// Known tells whether name is one of the tools.
func Known(name string) bool {
	switch name {
	case RunCode, RunCommand, WriteFile, ReadFile, ListFiles, ListArtifacts:
		return true
	}
	return false
}

// Names lists the tools' names.
func Names() []string {
	return []string{RunCode, RunCommand, WriteFile, ReadFile, ListFiles, ListArtifacts}
}

// failf is an observation of a failed call.
func failf(format string, a ...any) Observation {
	return Observation{Text: fmt.Sprintf(format, a...), IsError: true}
}

// Call runs one tool with its arguments, a JSON object. Whatever goes
// wrong, from unknown tools and malformed arguments to a sandbox that
// refuses, comes back as an observation with IsError, worded for the
// model; ctx ending is the only failure the observation cannot carry,
// and then err is ctx's error.
func (k *Kit) Call(ctx context.Context, name string, args string) (obs Observation, err error) {
	if !Known(name) {
		return failf("error: there is no tool %q; the tools are %s", name, strings.Join(Names(), ", ")), nil
	}
	if len(args) > k.opts.MaxArgs {
		return failf("error: the arguments are %s, over the %s a call may take; write big content in parts (run_code can append to a file)",
			Bytes(int64(len(args))), Bytes(int64(k.opts.MaxArgs))), nil
	}
	if strings.TrimSpace(args) == "" {
		args = "{}"
	}
	var a struct {
		Language string   `json:"language"`
		Code     *string  `json:"code"`
		Command  *string  `json:"command"`
		Path     string   `json:"path"`
		Content  *string  `json:"content"`
		Offset   int64    `json:"offset"`
		Timeout  *float64 `json:"timeout_seconds"`
	}
	if err := json.Unmarshal([]byte(args), &a); err != nil {
		return failf("error: %s arguments are not a valid JSON object of the tool's schema: %s", name, jsonProblem(err)), nil
	}
	timeout, bad := k.timeout(a.Timeout)
	if bad != "" {
		return failf("error: %s", bad), nil
	}
	switch name {
	case RunCode:
		if a.Code == nil {
			return failf("error: run_code needs code"), nil
		}
		obs, err = k.runCode(ctx, a.Language, *a.Code, timeout)
	case RunCommand:
		if a.Command == nil || strings.TrimSpace(*a.Command) == "" {
			return failf("error: run_command needs a command"), nil
		}
		obs, err = k.runCommand(ctx, *a.Command, timeout)
	case WriteFile:
		if a.Content == nil {
			return failf("error: write_file needs path and content"), nil
		}
		obs, err = k.writeFile(ctx, a.Path, *a.Content)
	case ReadFile:
		return k.readFile(ctx, a.Path, a.Offset)
	case ListFiles:
		return k.listFiles(ctx, a.Path)
	case ListArtifacts:
		return k.listArtifacts(ctx)
	}
	if err != nil {
		return obs, err
	}
	k.noteChanges(ctx, &obs)
	return obs, nil
}

// jsonProblem words a decoding error for the model.
func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("%s must be %s, not %s", te.Field, jsonKind(te.Type.Kind().String()), te.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s (at byte %d)", se.Error(), se.Offset)
	}
	return err.Error()
}

func jsonKind(k string) string {
	switch k {
	case "string":
		return "a string"
	case "float64", "int64", "int":
		return "a number"
	case "ptr":
		return "of the schema's type"
	}
	return k
}

// timeout checks a call's timeout_seconds.
func (k *Kit) timeout(secs *float64) (time.Duration, string) {
	if secs == nil || *secs == 0 {
		return 0, ""
	}
	d := time.Duration(*secs * float64(time.Second))
	if *secs < 0 || d <= 0 || d > k.opts.MaxTimeout {
		return 0, fmt.Sprintf("timeout_seconds %g is out of range: a call may run from 0 to %v", *secs, k.opts.MaxTimeout)
	}
	return d, ""
}

// sandboxProblem turns an error of the sandbox into an observation, or
// returns ctx's error when ctx ended.
func sandboxProblem(ctx context.Context, what string, err error) (Observation, error) {
	if ctx.Err() != nil {
		return Observation{}, ctx.Err()
	}
	msg := err.Error()
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		msg = "not found"
	case errors.Is(err, sandbox.ErrLimit):
		msg = "over a cap: " + msg
	}
	return failf("error: %s: %s", what, msg), nil
}

func (k *Kit) runCommand(ctx context.Context, command string, timeout time.Duration) (Observation, error) {
	if strings.ContainsRune(command, 0) {
		return failf("error: the command contains a NUL byte"), nil
	}
	res, err := k.sb.Exec(ctx, []string{"bash", "-c", command}, timeout)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return sandboxProblem(ctx, "run_command", err)
	}
	if ctx.Err() != nil {
		return Observation{}, ctx.Err()
	}
	if timeout == 0 {
		timeout = time.Duration(k.env.Limits.Timeout)
	}
	return k.describeResult(res, timeout), nil
}

// describeResult writes a command's Result for the model.
func (k *Kit) describeResult(res sandbox.Result, timeout time.Duration) Observation {
	var b strings.Builder
	isErr := res.ExitCode != 0 || res.TimedOut || res.OOMKilled || res.Signal != ""
	switch {
	case res.TimedOut:
		fmt.Fprintf(&b, "timed out: killed at the %v timeout\n", timeout)
	case res.OOMKilled:
		fmt.Fprintf(&b, "killed: out of memory (the cap is %s)\n", sandbox.FormatSize(k.env.Limits.MemoryBytes))
	case res.Signal != "":
		fmt.Fprintf(&b, "killed by %s\n", res.Signal)
	default:
		fmt.Fprintf(&b, "exit %d\n", res.ExitCode)
	}
	if res.PidsLimitHit {
		fmt.Fprintf(&b, "a fork failed at the cap of %d processes\n", k.env.Limits.Pids)
	}
	k.stream(&b, "stdout", res.Stdout, res.StdoutTruncated)
	k.stream(&b, "stderr", res.Stderr, res.StderrTruncated)
	for _, e := range res.Egress {
		if !e.Allowed {
			fmt.Fprintf(&b, "network refused: %s:%d: %s\n", e.Host, e.Port, e.Reason)
		}
	}
	return Observation{Text: strings.TrimRight(b.String(), "\n"), IsError: isErr}
}

// stream appends one output stream, shortened.
func (k *Kit) stream(b *strings.Builder, name, text string, truncated bool) {
	if text == "" {
		return
	}
	text = strings.ToValidUTF8(text, "�")
	fmt.Fprintf(b, "--- %s ---\n%s", name, Clip(text, k.opts.OutputCap))
	if !strings.HasSuffix(text, "\n") {
		b.WriteString("\n")
	}
	if truncated {
		fmt.Fprintf(b, "[%s was cut at the sandbox's cap of %s]\n", name, sandbox.FormatSize(k.env.Limits.OutputBytes))
	}
}

func (k *Kit) runCode(ctx context.Context, lang, code string, timeout time.Duration) (Observation, error) {
	switch lang {
	case "", "python", "javascript", "bash":
	default:
		return failf("error: language %q: run_code runs python, javascript or bash", lang), nil
	}
	if lang == "" {
		lang = "python"
	}
	x, err := k.sb.Code(ctx, lang, code, timeout)
	if err != nil {
		return sandboxProblem(ctx, "run_code", err)
	}
	var b strings.Builder
	obs := Observation{}
	if x.Restarted {
		b.WriteString("note: the interpreter was restarted; variables and imports from earlier calls are gone\n")
	}
	k.stream(&b, "stdout", x.Stdout, false)
	k.stream(&b, "stderr", x.Stderr, false)
	if x.OutputTruncated {
		b.WriteString("[output was cut at the interpreter's cap]\n")
	}
	for _, o := range x.Outputs {
		if img, ok := bundleImage(o.Data); ok && len(img.Data) <= DefaultMaxImage {
			obs.Images = append(obs.Images, img)
			fmt.Fprintf(&b, "[image %d: %s]\n", len(obs.Images), img.Describe())
			continue
		}
		if t, ok := o.Data["text/plain"]; ok {
			label := "result"
			if o.Kind == "display" {
				label = "display"
			}
			fmt.Fprintf(&b, "%s: %s\n", label, Clip(strings.ToValidUTF8(t, "�"), k.opts.OutputCap))
		} else if len(o.Data) > 0 {
			types := make([]string, 0, len(o.Data))
			for t := range o.Data {
				types = append(types, t)
			}
			sort.Strings(types)
			fmt.Fprintf(&b, "%s: [%s]\n", o.Kind, strings.Join(types, ", "))
		}
	}
	if x.Interrupted {
		obs.IsError = true
		fmt.Fprintf(&b, "interrupted: the call ran past its timeout\n")
	}
	if e := x.Error; e != nil {
		obs.IsError = true
		fmt.Fprintf(&b, "error: %s: %s\n", e.Name, StripANSI(e.Value))
		if tb := Traceback(e.Traceback); tb != "" {
			fmt.Fprintf(&b, "%s\n", tb)
		}
	}
	if b.Len() == 0 {
		b.WriteString("ok (no output)")
	}
	obs.Text = strings.TrimRight(b.String(), "\n")
	if !k.env.Vision && len(obs.Images) > 0 {
		obs.Text += "\n(images are not shown to you; save figures with savefig into /workspace/output to keep them)"
	}
	return obs, nil
}

// bundleImage finds a PNG or JPEG in a MIME bundle.
func bundleImage(data map[string]string) (Image, bool) {
	for _, mime := range []string{"image/png", "image/jpeg"} {
		v, ok := data[mime]
		if !ok {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
		if err != nil {
			continue
		}
		return newImage(mime, raw), true
	}
	return Image{}, false
}

func newImage(mime string, raw []byte) Image {
	img := Image{MIME: mime, Data: raw}
	if c, _, err := image.DecodeConfig(bytes.NewReader(raw)); err == nil {
		img.Width, img.Height = c.Width, c.Height
	}
	return img
}

// Resolve makes a path the model gave absolute: a relative path is
// relative to /workspace. It must lie in /workspace/input,
// /workspace/output or /tmp.
func Resolve(p string) (string, error) {
	if p == "" {
		return "", errors.New("a path is needed")
	}
	if strings.ContainsRune(p, 0) {
		return "", errors.New("the path contains a NUL byte")
	}
	if !path.IsAbs(p) {
		p = path.Join("/workspace", p)
	}
	p = path.Clean(p)
	for _, dir := range []string{InputDir, OutputDir, TmpDir} {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s is outside what the file tools reach (%s, %s, %s); run_command can read other files", p, InputDir, OutputDir, TmpDir)
}

func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

func (k *Kit) writeFile(ctx context.Context, p, content string) (Observation, error) {
	abs, err := Resolve(p)
	if err != nil {
		return failf("error: write_file: %s", err), nil
	}
	if under(abs, InputDir) {
		return failf("error: write_file: %s is read-only; write to %s or %s", InputDir, OutputDir, TmpDir), nil
	}
	if abs == OutputDir || abs == TmpDir {
		return failf("error: write_file: %s is a folder; name a file in it", abs), nil
	}
	info, err := k.sb.Put(ctx, abs, strings.NewReader(content), 0)
	if err != nil {
		return sandboxProblem(ctx, "write_file "+abs, err)
	}
	return Observation{Text: fmt.Sprintf("wrote %s (%s)", abs, Bytes(info.Size))}, nil
}

func (k *Kit) readFile(ctx context.Context, p string, offset int64) (Observation, error) {
	abs, err := Resolve(p)
	if err != nil {
		return failf("error: read_file: %s", err), nil
	}
	if offset < 0 {
		return failf("error: read_file: offset %d is negative", offset), nil
	}
	rc, info, err := k.sb.Get(ctx, abs)
	if err != nil {
		return sandboxProblem(ctx, "read_file "+abs, err)
	}
	defer rc.Close()
	if info.IsDir() {
		return failf("error: read_file: %s is a folder; list_files lists it", abs), nil
	}
	if offset > info.Size {
		return failf("error: read_file: offset %d is past the end of %s (%d bytes)", offset, abs, info.Size), nil
	}
	if _, err := io.CopyN(io.Discard, rc, offset); err != nil {
		return sandboxProblem(ctx, "read_file "+abs, err)
	}
	limit := int64(k.opts.ReadCap)
	head := make([]byte, 512)
	n, _ := io.ReadFull(rc, head)
	head = head[:n]
	mime := http.DetectContentType(head)
	if offset == 0 && (mime == "image/png" || mime == "image/jpeg") {
		if info.Size > DefaultMaxImage {
			return Observation{Text: fmt.Sprintf("%s: %s image of %s, over the %s an observation takes", abs, mime, Bytes(info.Size), Bytes(DefaultMaxImage))}, nil
		}
		rest, err := io.ReadAll(io.LimitReader(rc, DefaultMaxImage))
		if err != nil {
			return sandboxProblem(ctx, "read_file "+abs, err)
		}
		img := newImage(mime, append(head, rest...))
		text := fmt.Sprintf("%s: [image 1: %s]", abs, img.Describe())
		if !k.env.Vision {
			text += " (images are not shown to you)"
		}
		return Observation{Text: text, Images: []Image{img}}, nil
	}
	rest, err := io.ReadAll(io.LimitReader(rc, limit-int64(len(head))+utf8.UTFMax))
	if err != nil {
		return sandboxProblem(ctx, "read_file "+abs, err)
	}
	data := append(head, rest...)
	if bytes.IndexByte(data, 0) >= 0 || !utf8.Valid(trimPartialRune(data)) {
		return Observation{Text: fmt.Sprintf("%s: binary (%s), %s; not shown: inspect it with run_code", abs, mime, Bytes(info.Size))}, nil
	}
	if int64(len(data)) > limit {
		data = trimPartialRune(data[:limit])
	}
	end := offset + int64(len(data))
	text := string(data)
	if offset > 0 || end < info.Size {
		text = fmt.Sprintf("[%s: bytes %d to %d of %d", abs, offset, end, info.Size)
		if end < info.Size {
			text += fmt.Sprintf("; read on with offset %d", end)
		}
		text += "]\n" + string(data)
	}
	return Observation{Text: text}, nil
}

// trimPartialRune drops an incomplete UTF-8 character at the end of b.
func trimPartialRune(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			break
		}
	}
	return b
}

func (k *Kit) listFiles(ctx context.Context, p string) (Observation, error) {
	dirs := []string{InputDir, OutputDir}
	if p != "" && p != "/workspace" && p != "." {
		abs, err := Resolve(p)
		if err != nil {
			return failf("error: list_files: %s", err), nil
		}
		dirs = []string{abs}
	}
	var b strings.Builder
	for _, d := range dirs {
		files, more, err := k.walk(ctx, d)
		if err != nil {
			return sandboxProblem(ctx, "list_files "+d, err)
		}
		label := d
		if d == InputDir {
			label += " (read-only)"
		}
		fmt.Fprintf(&b, "%s:\n", label)
		if len(files) == 0 {
			b.WriteString("  (empty)\n")
		}
		for _, f := range files {
			rel := strings.TrimPrefix(f.Path, d+"/")
			switch {
			case f.IsDir():
				fmt.Fprintf(&b, "  %s/\n", rel)
			case f.Mode&fs.ModeSymlink != 0:
				fmt.Fprintf(&b, "  %s -> %s\n", rel, f.Target)
			default:
				fmt.Fprintf(&b, "  %s  %s\n", rel, Bytes(f.Size))
			}
		}
		if more {
			fmt.Fprintf(&b, "  [… more entries; list a subfolder]\n")
		}
	}
	return Observation{Text: strings.TrimRight(b.String(), "\n")}, nil
}

// walk lists dir's tree, folders before their contents, up to maxListed
// entries; more says there were others.
func (k *Kit) walk(ctx context.Context, dir string) (files []sandbox.FileInfo, more bool, err error) {
	var visit func(d string, depth int) error
	visit = func(d string, depth int) error {
		entries, err := k.sb.List(ctx, d)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if len(files) >= maxListed {
				more = true
				return nil
			}
			if e.Path == "" {
				e.Path = path.Join(d, e.Name)
			}
			files = append(files, e)
			if e.IsDir() && depth < 8 {
				if err := visit(e.Path, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	err = visit(dir, 0)
	return files, more, err
}

func (k *Kit) listArtifacts(ctx context.Context) (Observation, error) {
	arts, err := k.sb.Artifacts(ctx)
	if err != nil {
		return sandboxProblem(ctx, "list_artifacts", err)
	}
	if len(arts) == 0 {
		return Observation{Text: OutputDir + " is empty: nothing would go to the user"}, nil
	}
	var b strings.Builder
	for _, a := range arts {
		fmt.Fprintf(&b, "%s  %s  %s", a.Path, Bytes(a.Size), a.Verdict)
		if a.Reason != "" && a.Verdict != sandbox.VerdictAccepted {
			fmt.Fprintf(&b, ": %s", a.Reason)
		}
		b.WriteString("\n")
	}
	return Observation{Text: strings.TrimRight(b.String(), "\n")}, nil
}

// noteChanges adds to obs the files of /workspace/output that are new or
// changed since the last call.
func (k *Kit) noteChanges(ctx context.Context, obs *Observation) {
	files, _, err := k.walk(ctx, OutputDir)
	if err != nil {
		return
	}
	now := map[string]sandbox.FileInfo{}
	var changed []string
	for _, f := range files {
		if f.IsDir() {
			continue
		}
		rel := strings.TrimPrefix(f.Path, OutputDir+"/")
		now[rel] = f
		if old, ok := k.seen[rel]; !ok || old.Size != f.Size || !old.ModTime.Equal(f.ModTime) {
			f.Path = rel
			obs.Changed = append(obs.Changed, f)
			changed = append(changed, fmt.Sprintf("%s (%s)", rel, Bytes(f.Size)))
		}
	}
	k.seen = now
	if len(changed) > 0 {
		obs.Text += "\nnew or changed in " + OutputDir + ": " + strings.Join(changed, ", ")
	}
}
