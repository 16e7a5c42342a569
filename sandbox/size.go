package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ParseSize reads a byte count such as "512MiB", "1g", "100k" or "4096".
// K, M, G and T (alone or with "iB") are powers of 1024, as in docker;
// kB, MB, GB and TB (any case) are powers of 1000.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("empty size: %w", ErrInvalid)
	}
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	v, err := strconv.ParseFloat(num, 64)
	switch {
	case errors.Is(err, strconv.ErrRange):
		return 0, fmt.Errorf("size %q is too large: %w", s, ErrInvalid)
	case err != nil || num == "":
		return 0, fmt.Errorf("size %q: not a number: %w", s, ErrInvalid)
	}
	mult, ok := sizeUnits[strings.ToLower(unit)]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q (use B, KiB, MiB, GiB, TiB, or kB, MB, GB, TB): %w", s, unit, ErrInvalid)
	}
	b := v * float64(mult)
	if b >= 1<<62 {
		return 0, fmt.Errorf("size %q is too large: %w", s, ErrInvalid)
	}
	return int64(b), nil
}

var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1 << 10, "ki": 1 << 10, "kib": 1 << 10,
	"m": 1 << 20, "mi": 1 << 20, "mib": 1 << 20,
	"g": 1 << 30, "gi": 1 << 30, "gib": 1 << 30,
	"t": 1 << 40, "ti": 1 << 40, "tib": 1 << 40,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
}

// FormatSize writes n in the largest binary unit that keeps one decimal.
func FormatSize(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f := float64(n)
	u := 0
	for f >= 1024 && u < len(units)-1 {
		f /= 1024
		u++
	}
	if u == 0 {
		return fmt.Sprintf("%dB", n)
	}
	return strings.TrimSuffix(strings.TrimSuffix(fmt.Sprintf("%.1f", f), "0"), ".") + units[u]
}

// Duration is a time.Duration that reads and writes JSON as a Go duration
// string ("30s"); a bare JSON number is read as seconds.
type Duration time.Duration

// ParseDuration reads "30s", "2m", "1h30m" or a bare number of seconds. A
// number too large for a time.Duration (about 292 years) is refused as too
// large, not wrapped around.
func ParseDuration(s string) (Duration, error) {
	t := strings.TrimSpace(s)
	if f, err := strconv.ParseFloat(t, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		return seconds(f, s)
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, fmt.Errorf("duration %q: use a number of seconds or a form like 30s, 2m: %w", s, ErrInvalid)
	}
	return Duration(d), nil
}

// seconds converts a number of seconds to a Duration; s is the text it was
// read from, for the error. NaN is not a number, and a number past what a
// time.Duration holds is too large (or, below zero, out of range): in Go,
// converting such a float to an integer gives an arbitrary value.
func seconds(f float64, s string) (Duration, error) {
	ns := f * float64(time.Second)
	switch {
	case math.IsNaN(ns):
		return 0, fmt.Errorf("duration %q: not a number: %w", s, ErrInvalid)
	case ns >= math.MaxInt64:
		return 0, fmt.Errorf("duration %q is too large: %w", s, ErrInvalid)
	case ns <= math.MinInt64:
		return 0, fmt.Errorf("duration %q is out of range: %w", s, ErrInvalid)
	}
	return Duration(ns), nil
}

// String writes the duration the way time.Duration does.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes the duration as a string such as "30s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON accepts a duration string or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var f float64
		if err := json.Unmarshal(b, &f); err != nil {
			return fmt.Errorf("duration must be a string like \"30s\" or a number of seconds: %w", ErrInvalid)
		}
		v, err := seconds(f, string(b))
		*d = v
		return err
	}
	v, err := ParseDuration(s)
	*d = v
	return err
}
