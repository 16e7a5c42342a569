package e2b

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/interp"
)

func TestASCIIJSON(t *testing.T) {
	in := map[string]string{"text": "héllo → 世界 🙂 \"q\""}
	b, _ := json.Marshal(in)
	esc := asciiJSON(b)
	for _, c := range esc {
		if c >= 0x80 {
			t.Fatalf("non-ASCII byte in %s", esc)
		}
	}
	var back map[string]string
	if err := json.Unmarshal(esc, &back); err != nil || back["text"] != in["text"] {
		t.Errorf("round trip: %q %v", back, err)
	}
}

func TestLines(t *testing.T) {
	now := time.Unix(1, 0)
	res := lines(interp.Event{Type: interp.EventResult, Data: map[string]string{interp.MIMEText: "3", interp.MIMEJSON: `{"a":1}`, "application/x-custom": "c"}}, now)
	b, _ := json.Marshal(res[0])
	if string(b) != `{"application/x-custom":"c","is_main_result":true,"json":{"a":1},"text":"3","type":"result"}` {
		t.Errorf("result line %s", b)
	}
	e := lines(interp.Event{Type: interp.EventError, Name: "ZeroDivisionError", Value: "division by zero", Traceback: []string{"a", "b"}}, now)
	if e[0]["traceback"] != "a\nb" || e[0]["name"] != "ZeroDivisionError" {
		t.Errorf("error line %v", e[0])
	}
}
