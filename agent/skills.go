package agent

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/tools"
)

// SkillsDir is where the skills are in the sandbox: under the inputs, so
// that they are read-only to the code on every backend, as inputs are.
const SkillsDir = tools.InputDir + "/skills"

// Caps of one skill folder.
const (
	maxSkillFiles = 200
	maxSkillBytes = 16 << 20
	maxSkills     = 64
)

// Skill is a folder of instructions (SKILL.md) and helper scripts that
// the model reads on demand.
type Skill struct {
	Name        string
	Description string
	// Dir is the folder on the host.
	Dir string
	// Files are the files' paths below Dir, slash-separated.
	Files []string
	// Digest is the SHA-256 of the files' paths and contents.
	Digest string
}

// SkillInfo describes a skill in the transcript.
type SkillInfo struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Dir         string `json:"dir"`
	Files       int    `json:"files"`
	SHA256      string `json:"sha256"`
}

func (s Skill) info() SkillInfo {
	return SkillInfo{Name: s.Name, Description: s.Description, Dir: s.Dir, Files: len(s.Files), SHA256: s.Digest}
}

// Path is the skill's folder in the sandbox.
func (s Skill) Path() string { return SkillsDir + "/" + s.Name }

var skillName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// LoadSkills reads every subfolder of dir that holds a SKILL.md. The
// file may start with a front matter block ("---", "name: …",
// "description: …", "---"); the name defaults to the folder's, the
// description to the first line of text. Hidden files are left out;
// links and other special files are refused. Errors wrap
// sandbox.ErrInvalid.
func LoadSkills(dir string) ([]Skill, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("skills: %w: %w", err, sandbox.ErrInvalid)
	}
	var out []Skill
	seen := map[string]bool{}
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		sd := filepath.Join(dir, e.Name())
		if _, err := os.Lstat(filepath.Join(sd, "SKILL.md")); err != nil {
			continue
		}
		s, err := loadSkill(sd)
		if err != nil {
			return nil, err
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("skills: two skills named %q: %w", s.Name, sandbox.ErrInvalid)
		}
		seen[s.Name] = true
		out = append(out, s)
		if len(out) > maxSkills {
			return nil, fmt.Errorf("skills: more than %d skills in %s: %w", maxSkills, dir, sandbox.ErrInvalid)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("skills: no folder of %s holds a SKILL.md: %w", dir, sandbox.ErrInvalid)
	}
	return out, nil
}

func loadSkill(dir string) (Skill, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Skill{}, err
	}
	s := Skill{Name: filepath.Base(abs), Dir: abs}
	f, err := os.Open(filepath.Join(abs, "SKILL.md"))
	if err != nil {
		return Skill{}, fmt.Errorf("skill %s: %w: %w", dir, err, sandbox.ErrInvalid)
	}
	name, desc := frontMatter(f)
	f.Close()
	if name != "" {
		s.Name = name
	}
	if !skillName.MatchString(s.Name) {
		return Skill{}, fmt.Errorf("skill %s: name %q: lower-case letters, digits, '.', '_' and '-' only: %w", dir, s.Name, sandbox.ErrInvalid)
	}
	if desc == "" {
		return Skill{}, fmt.Errorf("skill %s: SKILL.md has no description: %w", dir, sandbox.ErrInvalid)
	}
	s.Description = desc
	h := sha256.New()
	total := int64(0)
	err = filepath.WalkDir(abs, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != abs && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(abs, p)
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file (links are not put in the sandbox)", rel)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		total += info.Size()
		s.Files = append(s.Files, filepath.ToSlash(rel))
		if len(s.Files) > maxSkillFiles || total > maxSkillBytes {
			return fmt.Errorf("over %d files or %s", maxSkillFiles, sandbox.FormatSize(maxSkillBytes))
		}
		fmt.Fprintf(h, "%s\x00%d\x00", filepath.ToSlash(rel), info.Size())
		g, err := os.Open(p)
		if err != nil {
			return err
		}
		defer g.Close()
		_, err = io.Copy(h, g)
		return err
	})
	if err != nil {
		return Skill{}, fmt.Errorf("skill %s: %w: %w", s.Name, err, sandbox.ErrInvalid)
	}
	sort.Strings(s.Files)
	s.Digest = hex.EncodeToString(h.Sum(nil))
	return s, nil
}

// frontMatter reads a SKILL.md's name and one-line description.
func frontMatter(r io.Reader) (name, desc string) {
	sc := bufio.NewScanner(io.LimitReader(r, 1<<20))
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	first, inFront := true, false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if first {
			first = false
			if line == "---" {
				inFront = true
				continue
			}
		}
		if inFront {
			if line == "---" {
				inFront = false
				continue
			}
			k, v, ok := strings.Cut(line, ":")
			v = strings.Trim(strings.TrimSpace(v), `"'`)
			switch strings.TrimSpace(k) {
			case "name":
				if ok {
					name = v
				}
			case "description":
				if ok {
					desc = v
				}
			}
			continue
		}
		if desc == "" && line != "" && !strings.HasPrefix(line, "#") {
			desc = line
		}
	}
	if len(desc) > 300 {
		desc = desc[:300] + "…"
	}
	return name, desc
}

// putSkills copies the skills into the sandbox, read-only.
func putSkills(ctx context.Context, sb tools.Sandbox, skills []Skill) error {
	for _, s := range skills {
		for _, rel := range s.Files {
			f, err := os.Open(filepath.Join(s.Dir, filepath.FromSlash(rel)))
			if err != nil {
				return fmt.Errorf("skill %s: %w", s.Name, err)
			}
			_, err = sb.Put(ctx, path.Join(s.Path(), rel), f, 0)
			f.Close()
			if err != nil {
				return fmt.Errorf("skill %s: putting %s in the sandbox: %w", s.Name, rel, err)
			}
		}
	}
	return nil
}
