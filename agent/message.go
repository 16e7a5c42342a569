package agent

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"

	"github.com/airlock-sandbox/airlock/tools"
)

// Roles of messages.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Message is one message of a conversation with the model.
type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	// Images go with a user message as image parts; the transcript keeps
	// their digests, not their bytes.
	Images []tools.Image `json:"-"`
	// ImageRefs describe Images in the transcript.
	ImageRefs []ImageRef `json:"images,omitempty"`
}

// ToolCall is one call the model asked for.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ImageRef stands for an image in the transcript.
type ImageRef struct {
	MIME   string `json:"mime"`
	Bytes  int    `json:"bytes"`
	SHA256 string `json:"sha256"`
	Width  int    `json:"width,omitempty"`
	Height int    `json:"height,omitempty"`
}

func imageRef(img tools.Image) ImageRef {
	sum := sha256.Sum256(img.Data)
	return ImageRef{MIME: img.MIME, Bytes: len(img.Data), SHA256: hex.EncodeToString(sum[:]), Width: img.Width, Height: img.Height}
}

// withImages returns a user message carrying images.
func withImages(text string, imgs []tools.Image) Message {
	m := Message{Role: RoleUser, Content: text, Images: imgs}
	for _, img := range imgs {
		m.ImageRefs = append(m.ImageRefs, imageRef(img))
	}
	return m
}

// params turns the conversation into the SDK's messages. Images go only
// with messages the model has not answered yet; once it has, they are
// said to have been shown, so that old images do not cost prompt tokens
// step after step.
func params(msgs []Message) []openai.ChatCompletionMessageParamUnion {
	answered := 0 // messages before the last assistant message
	for i, m := range msgs {
		if m.Role == RoleAssistant {
			answered = i
		}
	}
	out := make([]openai.ChatCompletionMessageParamUnion, 0, len(msgs))
	for i, m := range msgs {
		switch m.Role {
		case RoleSystem:
			out = append(out, openai.SystemMessage(m.Content))
		case RoleUser:
			if len(m.Images) == 0 {
				out = append(out, openai.UserMessage(m.Content))
				continue
			}
			if i < answered {
				out = append(out, openai.UserMessage(m.Content+"\n[the images were shown here earlier]"))
				continue
			}
			parts := []openai.ChatCompletionContentPartUnionParam{openai.TextContentPart(m.Content)}
			for _, img := range m.Images {
				parts = append(parts, openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{
					URL: "data:" + img.MIME + ";base64," + base64.StdEncoding.EncodeToString(img.Data)}))
			}
			out = append(out, openai.UserMessage(parts))
		case RoleAssistant:
			a := openai.ChatCompletionAssistantMessageParam{}
			if m.Content != "" {
				a.Content.OfString = param.NewOpt(m.Content)
			}
			for _, c := range m.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{ID: c.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: c.Name, Arguments: c.Arguments}}})
			}
			out = append(out, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case RoleTool:
			out = append(out, openai.ToolMessage(m.Content, m.ToolCallID))
		}
	}
	return out
}

// toolParams turns tool specs into the SDK's tools.
func toolParams(specs []tools.Spec) []openai.ChatCompletionToolUnionParam {
	out := make([]openai.ChatCompletionToolUnionParam, 0, len(specs))
	for _, s := range specs {
		out = append(out, openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: s.Name, Description: openai.String(s.Description), Parameters: shared.FunctionParameters(s.Parameters)}))
	}
	return out
}

// rawJSON is a helper for the transcript: v as JSON.
func rawJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`null`)
	}
	return b
}
