package dirfs

import "time"

// Info describes one entry. Its fields travel as JSON between a sandbox's
// init and its supervisor.
type Info struct {
	Path    string    `json:"path"`
	Name    string    `json:"name"`
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"` // an fs.FileMode
	ModTime time.Time `json:"mod_time"`
	Target  string    `json:"target,omitempty"`
}
