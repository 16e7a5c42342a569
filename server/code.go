package server

// registerCode mounts the code and context routes (pending the interp package).
func (s *Server) registerCode() {}
