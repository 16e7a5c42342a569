package e2b

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"path"
	"strings"

	"connectrpc.com/connect"
	"github.com/airlock-sandbox/airlock/e2b/internal/envdpb/filesystem/filesystemconnect"
	"github.com/airlock-sandbox/airlock/e2b/internal/envdpb/process/processconnect"
)

// envdRoutes mounts envd's services: process and filesystem over the
// Connect protocol (connect-go does the framing, JSON and binary), file
// transfers and the health check over plain HTTP.
func (h *Handler) envdRoutes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle(processconnect.NewProcessHandler(&processService{h: h}, connect.WithReadMaxBytes(16<<20)))
	mux.Handle(filesystemconnect.NewFilesystemHandler(&filesystemService{h: h}, connect.WithReadMaxBytes(1<<20)))
	mux.HandleFunc("GET /files", h.download)
	mux.HandleFunc("POST /files", h.upload)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "envd has no route "+r.Method+" "+r.URL.Path)
	})
	return mux
}

// resolve turns an envd path into the sandbox's: relative paths and "~"
// lead to Home.
func resolve(p string) string {
	switch {
	case p == "" || p == "~":
		return Home
	case strings.HasPrefix(p, "~/"):
		return path.Join(Home, p[2:])
	case !strings.HasPrefix(p, "/"):
		return path.Join(Home, p)
	}
	return path.Clean(p)
}

// userOf reads the user an envd request runs as, from the SDKs'
// "Authorization: Basic base64(USER:)" header or a username parameter:
// airlock runs everything as the sandbox's one user (uid 1000), which
// answers to "user", E2B's default; "root" and others are refused.
func userOf(hdr http.Header, param string) error {
	name := param
	if name == "" {
		if a := hdr.Get("Authorization"); a != "" {
			scheme, v, ok := strings.Cut(a, " ")
			if ok && strings.EqualFold(scheme, "Basic") {
				if b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v)); err == nil {
					name, _, _ = strings.Cut(string(b), ":")
				}
			}
		}
	}
	if name == "" || name == "user" {
		return nil
	}
	return connect.NewError(connect.CodePermissionDenied,
		fmt.Errorf("user %q: airlock runs code in a sandbox only as its unprivileged user (\"user\", uid 1000), never as root or another account", name))
}
