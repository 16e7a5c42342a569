package image

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// aptSource is one binary or source repository entry of the apt
// configuration, in either the one-line or the deb822 format.
type aptSource struct {
	Types      []string // "deb", "deb-src"
	URIs       []string
	Suites     []string
	Components []string
}

// aptSources is the host's apt configuration, in the order apt reads it.
type aptSources []aptSource

// readHostApt reads sources.list and then the *.list and *.sources files of
// sources.list.d in name order, under etcApt (normally /etc/apt). Files
// with other extensions are ignored, as apt itself ignores them.
func readHostApt(etcApt string) (aptSources, error) {
	var parts []string
	for _, pattern := range []string{"*.list", "*.sources"} {
		m, err := filepath.Glob(filepath.Join(etcApt, "sources.list.d", pattern))
		if err != nil {
			return nil, err
		}
		parts = append(parts, m...)
	}
	sort.Strings(parts)
	files := parts
	if _, err := os.Stat(filepath.Join(etcApt, "sources.list")); err == nil {
		files = append([]string{filepath.Join(etcApt, "sources.list")}, parts...)
	}
	var all aptSources
	for _, f := range files {
		srcs, err := parseAptFile(f)
		if err != nil {
			return nil, err
		}
		all = append(all, srcs...)
	}
	return all, nil
}

func parseAptFile(name string) ([]aptSource, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var srcs []aptSource
	if strings.HasSuffix(name, ".sources") {
		srcs, err = parseDeb822Sources(f)
	} else {
		srcs, err = parseOneLineSources(f)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return srcs, nil
}

// parseOneLineSources parses the classic format:
//
//	deb [ option=value ... ] URI SUITE [COMPONENT...]
func parseOneLineSources(r io.Reader) ([]aptSource, error) {
	var srcs []aptSource
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		typ, rest := fields[0], skipOptions(fields[1:])
		if rest == nil || len(rest) < 2 {
			return nil, fmt.Errorf("line %d: want TYPE [OPTIONS] URI SUITE [COMPONENT...]: %w", n, sandbox.ErrInvalid)
		}
		srcs = append(srcs, aptSource{
			Types: []string{typ}, URIs: rest[:1], Suites: rest[1:2], Components: rest[2:],
		})
	}
	return srcs, sc.Err()
}

// skipOptions drops a leading "[ ... ]" group, which may be split over
// several fields or glued to its neighbours. It returns nil when the group
// is not closed.
func skipOptions(fields []string) []string {
	if len(fields) == 0 || !strings.HasPrefix(fields[0], "[") {
		return fields
	}
	for i, f := range fields {
		if strings.HasSuffix(f, "]") {
			return fields[i+1:]
		}
		if _, after, ok := strings.Cut(f, "]"); ok && after != "" {
			return append([]string{after}, fields[i+1:]...)
		}
	}
	return nil
}

// parseDeb822Sources parses the deb822 format: paragraphs of "Key: value"
// fields separated by blank lines, continuation lines starting with white
// space, comments starting with '#'. Entries with "Enabled: no" are left out.
func parseDeb822Sources(r io.Reader) ([]aptSource, error) {
	var srcs []aptSource
	para := map[string]string{}
	last := ""
	flush := func() {
		if len(para) > 0 && !strings.EqualFold(para["enabled"], "no") {
			srcs = append(srcs, aptSource{
				Types:      strings.Fields(para["types"]),
				URIs:       strings.Fields(para["uris"]),
				Suites:     strings.Fields(para["suites"]),
				Components: strings.Fields(para["components"]),
			})
		}
		para, last = map[string]string{}, ""
	}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "#"):
		case strings.TrimSpace(line) == "":
			flush()
		case line[0] == ' ' || line[0] == '\t':
			if last == "" {
				return nil, fmt.Errorf("line %d: continuation line outside a field: %w", n, sandbox.ErrInvalid)
			}
			para[last] += " " + strings.TrimSpace(line)
		default:
			key, val, ok := strings.Cut(line, ":")
			if !ok {
				return nil, fmt.Errorf("line %d: want \"Key: value\": %w", n, sandbox.ErrInvalid)
			}
			last = strings.ToLower(strings.TrimSpace(key))
			para[last] = strings.TrimSpace(val)
		}
	}
	flush()
	return srcs, sc.Err()
}

// aptPlan is where a build fetches Debian packages from.
type aptPlan struct {
	// Mirror is the archive debootstrap uses.
	Mirror string
	// Lines are the one-line sources written into the root file system for
	// the package install: the suite and its -updates and -security
	// companions, as far as the host has them.
	Lines []string
}

// plan picks the mirror for suite. The host entries that carry the host's
// own release (hostSuite, hostSuite-updates, hostSuite-security…) are
// mapped onto the wanted suite. A non-empty override replaces the host
// configuration with that one mirror.
func (h aptSources) plan(hostSuite, suite, override string) (aptPlan, error) {
	if override != "" {
		return aptPlan{Mirror: override, Lines: []string{"deb " + override + " " + suite + " main"}}, nil
	}
	var p aptPlan
	seen := map[string]bool{}
	for _, s := range h {
		if !slices.Contains(s.Types, "deb") || len(s.URIs) == 0 {
			continue
		}
		for _, hs := range s.Suites {
			suffix, ok := strings.CutPrefix(hs, hostSuite)
			if !ok || (suffix != "" && !strings.HasPrefix(suffix, "-")) {
				continue
			}
			comps := s.Components
			if len(comps) == 0 {
				comps = []string{"main"}
			}
			line := fmt.Sprintf("deb %s %s%s %s", s.URIs[0], suite, suffix, strings.Join(comps, " "))
			if !seen[line] {
				seen[line] = true
				p.Lines = append(p.Lines, line)
			}
			if suffix == "" && p.Mirror == "" && slices.Contains(comps, "main") {
				p.Mirror = s.URIs[0]
			}
		}
	}
	if p.Mirror == "" {
		return aptPlan{}, fmt.Errorf("no Debian mirror for %q with component main in the host's apt sources; pass a mirror: %w", hostSuite, sandbox.ErrUnsupported)
	}
	return p, nil
}

// hostCodename reads VERSION_CODENAME from an os-release file.
func hostCodename(osRelease string) (string, error) {
	data, err := os.ReadFile(osRelease)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VERSION_CODENAME="); ok {
			if v = strings.Trim(v, `"'`); v != "" {
				return v, nil
			}
		}
	}
	return "", fmt.Errorf("%s has no VERSION_CODENAME; name a suite: %w", osRelease, sandbox.ErrUnsupported)
}
