package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// Prices are what a model's tokens cost, in US dollars per million tokens.
type Prices struct {
	Input float64 `json:"input"`
	// CachedInput is the price of prompt tokens the endpoint served from
	// its cache; nil means Input.
	CachedInput *float64 `json:"cached_input,omitempty"`
	Output      float64  `json:"output"`
}

// Cost is what u costs at these prices, in US dollars.
func (p Prices) Cost(u Usage) float64 {
	cached := p.Input
	if p.CachedInput != nil {
		cached = *p.CachedInput
	}
	return (float64(u.Prompt-u.Cached)*p.Input + float64(u.Cached)*cached + float64(u.Completion)*p.Output) / 1e6
}

// ParsePrices reads prices given on the command line:
// "input=0.15,cached=0.075,output=0.6" (US dollars per million tokens;
// cached is optional). Errors wrap sandbox.ErrInvalid.
func ParsePrices(s string) (Prices, error) {
	var p Prices
	seen := map[string]bool{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil || f < 0 || f > 1e6 {
			return p, fmt.Errorf("price %q: want input=N,output=N[,cached=N], in dollars per million tokens: %w", kv, sandbox.ErrInvalid)
		}
		switch k {
		case "input", "in":
			p.Input = f
		case "output", "out":
			p.Output = f
		case "cached", "cached_input":
			p.CachedInput = &f
		default:
			return p, fmt.Errorf("price %q: the prices are input, output and cached: %w", k, sandbox.ErrInvalid)
		}
		seen[k] = true
	}
	if !(seen["input"] || seen["in"]) || !(seen["output"] || seen["out"]) {
		return p, fmt.Errorf("prices %q: give both input and output: %w", s, sandbox.ErrInvalid)
	}
	return p, nil
}

// LoadPrices reads a price table, a JSON object of model names to prices
// ({"qwen2.5:7b": {"input": 0, "output": 0}, "*": {...}}), and returns the
// entry of model, or of "*" when model has none.
func LoadPrices(file, model string) (Prices, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return Prices{}, fmt.Errorf("price table: %w: %w", err, sandbox.ErrInvalid)
	}
	var table map[string]Prices
	if err := json.Unmarshal(b, &table); err != nil {
		return Prices{}, fmt.Errorf("price table %s: want an object of model names to {\"input\", \"cached_input\", \"output\"}: %v: %w", file, err, sandbox.ErrInvalid)
	}
	p, ok := table[model]
	if !ok {
		p, ok = table["*"]
	}
	if !ok {
		return Prices{}, fmt.Errorf("price table %s has no entry for model %q and no \"*\": %w", file, model, sandbox.ErrInvalid)
	}
	if p.Input < 0 || p.Output < 0 || (p.CachedInput != nil && *p.CachedInput < 0) {
		return Prices{}, fmt.Errorf("price table %s: a negative price for %q: %w", file, model, sandbox.ErrInvalid)
	}
	return p, nil
}
