package docker_test

import (
	"context"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/backend/docker"
	"github.com/airlock-sandbox/airlock/backend/internal/testimage"
	"github.com/airlock-sandbox/airlock/sandbox"
)

func TestDebugBomb(t *testing.T) {
	be := docker.New(docker.Options{Images: testimage.Store(t)})
	defer be.Close()
	p, _ := sandbox.Policy{Limits: sandbox.Limits{Pids: 64, Timeout: sandbox.Duration(5 * time.Second)}}.Normalize()
	inst, err := be.Create(context.Background(), sandbox.Spec{Image: "python", Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Destroy(context.Background())
	res, err := inst.Exec(context.Background(), sandbox.ExecRequest{Cmd: []string{"sh", "-c", "bomb() { bomb | bomb & }; bomb; sleep 3"}})
	t.Logf("bomb: %+v %v", res, err)
	res, err = inst.Exec(context.Background(), sandbox.ExecRequest{Cmd: []string{"python3", "-c", "import os; print([(p, open('/proc/%s/cmdline'%p).read()) for p in os.listdir('/proc') if p.isdigit()])"}})
	t.Logf("after: %+v %v", res, err)
}
