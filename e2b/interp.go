package e2b

import "net/http"

// jupyterRoutes mounts the code interpreter's routes.
func (h *Handler) jupyterRoutes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotImplemented, "this airlock has no code interpreter yet")
	})
	return mux
}
