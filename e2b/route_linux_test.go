package e2b_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	ppb "github.com/airlock-sandbox/airlock/e2b/internal/envdpb/process"
	"github.com/airlock-sandbox/airlock/e2b/internal/envdpb/process/processconnect"
)

// createRaw makes a sandbox through the control plane with a plain HTTP
// client and returns its id and token.
func createRaw(t *testing.T, ts *testServer, key string) (id, token string) {
	t.Helper()
	req, _ := http.NewRequest("POST", ts.URL+"/v2/sandboxes", strings.NewReader(`{"templateID":"base","timeout":60}`))
	req.Header.Set("X-API-KEY", key)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out struct{ SandboxID, EnvdAccessToken string }
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %v", res.StatusCode, err)
	}
	return out.SandboxID, out.EnvdAccessToken
}

// headerTransport adds headers to every request, and sets its Host.
type headerTransport struct {
	host string
	hdr  http.Header
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.hdr {
		r.Header[k] = v
	}
	if h.host != "" {
		r.Host = h.host
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestEnvdGoClient drives envd's process service with connect-go's own
// client over the binary protobuf codec, routed by the Host the SDKs use
// when only E2B_DOMAIN is set (PORT-ID.DOMAIN) rather than by headers.
func TestEnvdGoClient(t *testing.T) {
	forEachBackend(t, serverOptions{}, func(t *testing.T, ts *testServer) {
		id, token := createRaw(t, ts, aliceKey)
		client := func(host string, hdr http.Header) processconnect.ProcessClient {
			return processconnect.NewProcessClient(&http.Client{Transport: headerTransport{host: host, hdr: hdr}}, ts.URL)
		}
		good := client("49983-"+id+".sandbox.test", http.Header{"X-Access-Token": {token}})
		ctx := context.Background()
		stream, err := good.Start(ctx, connect.NewRequest(&ppb.StartRequest{Process: &ppb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "echo via-host; exit 4"}}}))
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		var pid uint32
		var end *ppb.ProcessEvent_EndEvent
		for stream.Receive() {
			switch ev := stream.Msg().GetEvent().GetEvent().(type) {
			case *ppb.ProcessEvent_Start:
				pid = ev.Start.GetPid()
			case *ppb.ProcessEvent_Data:
				out.Write(ev.Data.GetStdout())
			case *ppb.ProcessEvent_End:
				end = ev.End
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if pid == 0 || out.String() != "via-host\n" || end == nil || end.GetExitCode() != 4 || end.GetStatus() != "exit status 4" {
			t.Errorf("pid %d, stdout %q, end %v", pid, out.String(), end)
		}
		for name, c := range map[string]processconnect.ProcessClient{
			"no token":             client("49983-"+id+".sandbox.test", nil),
			"a token of a guess":   client("49983-0123456789abcdef0123456789abcdef.sandbox.test", http.Header{"X-Access-Token": {token}}),
			"bob's key on its id":  client("49983-"+id+".sandbox.test", http.Header{"X-Api-Key": {bobKey}}),
			"no host and no route": client("", http.Header{"X-Access-Token": {token}}),
		} {
			_, err := c.List(ctx, connect.NewRequest(&ppb.ListRequest{}))
			if err == nil {
				t.Errorf("%s: List answered", name)
				continue
			}
			t.Logf("%s: %v", name, err)
		}
		if _, err := client("", http.Header{"E2b-Sandbox-Id": {id}, "X-Access-Token": {token}}).List(ctx, connect.NewRequest(&ppb.ListRequest{})); err != nil {
			t.Errorf("routed by header: %v", err)
		}
	})
}
