package version

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const script = "../../scripts/version"

// scriptRepo is a copy of scripts/version in a directory of its own, as
// the script sees the tree it is in.
type scriptRepo struct {
	t   *testing.T
	dir string
}

func newScriptRepo(t *testing.T, git bool) scriptRepo {
	t.Helper()
	r := scriptRepo{t: t, dir: t.TempDir()}
	body, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(r.dir, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.dir, "scripts", "version"), body, 0o755); err != nil {
		t.Fatal(err)
	}
	if git {
		r.git("init", "-q")
		r.commit("first")
	}
	return r
}

func (r scriptRepo) git(args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.org", "-c", "tag.gpgSign=false", "-c", "commit.gpgSign=false"}, args...)...)
	cmd.Dir = r.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// commit changes the tracked file and commits it.
func (r scriptRepo) commit(msg string) {
	r.t.Helper()
	if err := os.WriteFile(filepath.Join(r.dir, "file"), []byte(msg), 0o644); err != nil {
		r.t.Fatal(err)
	}
	r.git("add", "-A")
	r.git("commit", "-q", "-m", msg)
}

// run runs the script with args and the environment env added; it
// returns its output and whether it succeeded.
func (r scriptRepo) run(env []string, args ...string) (string, bool) {
	r.t.Helper()
	cmd := exec.Command(filepath.Join(r.dir, "scripts", "version"), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err == nil
}

func (r scriptRepo) want(want string) {
	r.t.Helper()
	got, ok := r.run(nil)
	if !ok || got != want {
		r.t.Errorf("scripts/version: %q (ok %t), want %q", got, ok, want)
	}
}

func needGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
}

// TestScriptFromTags: the version follows the tags as the script's
// comment says.
func TestScriptFromTags(t *testing.T) {
	needGit(t)
	r := newScriptRepo(t, true)
	r.want("0.0.0-dev")
	r.git("tag", "v0.4.0")
	r.want("0.4.0")
	if err := os.WriteFile(filepath.Join(r.dir, "file"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	r.want("0.4.0+dirty")
	r.commit("second")
	r.commit("third")
	r.want("0.4.1-dev.2+g" + r.git("rev-parse", "--short=12", "HEAD"))
	if err := os.WriteFile(filepath.Join(r.dir, "file"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	r.want("0.4.1-dev.2+g" + r.git("rev-parse", "--short=12", "HEAD") + ".dirty")
	r.git("checkout", "-q", "--", "file")
	r.git("tag", "v0.5.0-rc.1")
	r.want("0.5.0-rc.1")
	r.commit("fourth")
	r.want("0.5.0-rc.1.dev.1+g" + r.git("rev-parse", "--short=12", "HEAD"))

	// what the linker gets: the same version, the commit, modified
	got, ok := r.run(nil, "--ldflags")
	want := "-X " + pkgPath + ".version=0.5.0-rc.1.dev.1+g" + r.git("rev-parse", "--short=12", "HEAD") +
		" -X " + pkgPath + ".revision=" + r.git("rev-parse", "HEAD") + " -X " + pkgPath + ".modified=false"
	if !ok || got != want {
		t.Errorf("--ldflags: %q (ok %t), want %q", got, ok, want)
	}
	// a tracked file touched is not modified; one changed is
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(r.dir, "file"), later, later); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.run(nil, "--ldflags"); !strings.HasSuffix(got, ".modified=false") {
		t.Errorf("--ldflags after a touch: %q, want modified=false", got)
	}
	if err := os.WriteFile(filepath.Join(r.dir, "file"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.run(nil, "--ldflags"); !strings.HasSuffix(got, ".modified=true") {
		t.Errorf("--ldflags after a change: %q, want modified=true", got)
	}
	r.git("checkout", "-q", "--", "file")

	// the version set from outside wins, and must be one
	if got, ok := r.run([]string{"IBPATH_VERSION=1.2.3-rc.2+build.7"}); !ok || got != "1.2.3-rc.2+build.7" {
		t.Errorf("IBPATH_VERSION=1.2.3-rc.2+build.7: %q (ok %t)", got, ok)
	}
	if got, ok := r.run([]string{"IBPATH_VERSION=1.2"}); ok || !strings.Contains(got, "IBPATH_VERSION=1.2 is not a semantic version") {
		t.Errorf("IBPATH_VERSION=1.2: %q (ok %t), want an error", got, ok)
	}
	if got, ok := r.run(nil, "--json"); ok || !strings.Contains(got, `unknown argument "--json"`) {
		t.Errorf("--json: %q (ok %t), want an error", got, ok)
	}

	// a tag that is no semantic version stops the build
	r.commit("fifth")
	r.git("tag", "vnext")
	if got, ok := r.run(nil); ok || !strings.Contains(got, "tag vnext is not a semantic version") {
		t.Errorf("after tag vnext: %q (ok %t), want an error naming the tag", got, ok)
	}
}

// TestScriptOutsideGit: a tree without git (an unpacked tarball) is
// 0.0.0-dev, with no revision.
func TestScriptOutsideGit(t *testing.T) {
	r := newScriptRepo(t, false)
	r.want("0.0.0-dev")
	if got, ok := r.run(nil, "--ldflags"); !ok || got != "-X "+pkgPath+".version=0.0.0-dev" {
		t.Errorf("--ldflags: %q (ok %t)", got, ok)
	}
}

const pkgPath = "github.com/ibpath/ibpath/internal/version"

// TestBuildStamped builds a program with the flags scripts/version prints
// for this tree, and without them: Get reports what the script said, or
// Dev.
func TestBuildStamped(t *testing.T) {
	out, err := exec.Command(script, "--ldflags").Output()
	if err != nil {
		t.Fatalf("scripts/version --ldflags: %v", err)
	}
	ldflags := strings.TrimSpace(string(out))
	show := func(args ...string) map[string]string {
		t.Helper()
		bin := filepath.Join(t.TempDir(), "show")
		build := exec.Command("go", append(append([]string{"build", "-buildvcs=false", "-o", bin}, args...), "./testdata/show")...)
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		out, err := exec.Command(bin).Output()
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			k, v, _ := strings.Cut(l, "=")
			m[k] = v
		}
		return m
	}
	stamped := show("-ldflags", ldflags)
	flags := map[string]string{}
	for _, m := range regexp.MustCompile(`-X \S+\.(\w+)=(\S*)`).FindAllStringSubmatch(ldflags, -1) {
		flags[m[1]] = m[2]
	}
	if flags["version"] == "" || stamped["version"] != flags["version"] || stamped["revision"] != flags["revision"] ||
		stamped["modified"] != map[string]string{"": "false", "false": "false", "true": "true"}[flags["modified"]] {
		t.Errorf("built with %s: says %v", ldflags, stamped)
	}
	if plain := show(); plain["version"] != Dev || plain["revision"] != "" {
		t.Errorf("built without flags or VCS information: says %v, want version %s and no revision", plain, Dev)
	}
}
