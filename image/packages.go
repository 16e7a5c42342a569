package image

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// parseDpkgStatus reads a dpkg status file and returns the packages whose
// status is "install ok installed", sorted by name.
func parseDpkgStatus(r io.Reader) ([]Package, error) {
	var pkgs []Package
	var cur Package
	installed := false
	flush := func() {
		if cur.Name != "" && installed {
			pkgs = append(pkgs, cur)
		}
		cur, installed = Package{}, false
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			flush()
			continue
		}
		key, val, ok := strings.Cut(line, ":")
		if !ok || line[0] == ' ' || line[0] == '\t' {
			continue
		}
		val = strings.TrimSpace(val)
		switch key {
		case "Package":
			cur.Name = val
		case "Version":
			cur.Version = val
		case "Status":
			installed = val == "install ok installed"
		}
	}
	flush()
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read dpkg status: %w", err)
	}
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].Name < pkgs[j].Name })
	return pkgs, nil
}

// npmPackages lists every package installed under a node_modules folder,
// nested dependencies included, each name@version once, sorted.
func npmPackages(nodeModules string) ([]Package, error) {
	seen := map[Package]bool{}
	err := filepath.WalkDir(nodeModules, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || d.Name() != "package.json" || !isPackageRoot(filepath.Dir(p)) {
			return nil
		}
		pkg, err := readPackageJSON(p)
		if err != nil {
			return err
		}
		if pkg.Name != "" {
			seen[pkg] = true
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list npm packages: %w", err)
	}
	pkgs := make([]Package, 0, len(seen))
	for p := range seen {
		pkgs = append(pkgs, p)
	}
	sort.Slice(pkgs, func(i, j int) bool {
		if pkgs[i].Name != pkgs[j].Name {
			return pkgs[i].Name < pkgs[j].Name
		}
		return pkgs[i].Version < pkgs[j].Version
	})
	return pkgs, nil
}

// isPackageRoot tells whether dir is node_modules/NAME or
// node_modules/@SCOPE/NAME, as opposed to a folder inside a package.
func isPackageRoot(dir string) bool {
	parent := filepath.Dir(dir)
	if filepath.Base(parent) == "node_modules" {
		return true
	}
	return strings.HasPrefix(filepath.Base(parent), "@") && filepath.Base(filepath.Dir(parent)) == "node_modules"
}

func readPackageJSON(p string) (Package, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return Package{}, err
	}
	var pj struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	}
	if err := json.Unmarshal(data, &pj); err != nil {
		return Package{}, fmt.Errorf("%s: %w", p, err)
	}
	return Package{Name: pj.Name, Version: pj.Version}, nil
}
