package server

import "net/http"

// serveOpenAPI serves the API's OpenAPI document (pending).
func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotImplemented, "unsupported", "pending")
}
