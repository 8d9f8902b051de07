package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const manPath = "../../docs/man/ibpath.1"

// TestManPageFresh fails when docs/man/ibpath.1 is not the page the app
// generates (run go test ./internal/cli -update to regenerate it).
func TestManPageFresh(t *testing.T) {
	page, err := ManPage()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{".TH ibpath 1", "status", "migrate", "--dry-run", "IBPATH_SOCKET", "completion"} {
		if !strings.Contains(page, want) {
			t.Errorf("man page lacks %q", want)
		}
	}
	if *update {
		if err := os.MkdirAll(filepath.Dir(manPath), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(manPath, []byte(page), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	committed, err := os.ReadFile(manPath)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/cli -update to generate it)", err)
	}
	if string(committed) != page {
		t.Errorf("%s is stale: run go test ./internal/cli -update and commit it", manPath)
	}

	// `ibpath man` prints that page, whatever the environment says.
	t.Setenv("IBPATH_SOCKET", "/elsewhere.sock")
	out, stderr, code := run("man")
	if code != ExitOK || out != page {
		t.Errorf("ibpath man: exit %d (%s), output differs from ManPage: %v", code, stderr, out != page)
	}
}

// TestCompletionScripts: each script is in its golden file, names ibpath
// and, for bash and zsh, asks ibpath for candidates; bash and zsh accept
// the syntax when they are installed.
func TestCompletionScripts(t *testing.T) {
	for _, shell := range shells {
		args := []string{"completion", shell}
		out, stderr, code := run(args...)
		checkGolden(t, "completion-"+shell, transcript(args, out, stderr, code))
		if code != ExitOK {
			t.Fatalf("%s: exit %d: %s", shell, code, stderr)
		}
		want := []string{"ibpath"}
		if shell == "fish" {
			want = append(want, "complete -c ibpath", "status", "migrate", "dry-run", "store")
		} else {
			want = append(want, "--generate-bash-completion")
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s script lacks %q", shell, w)
			}
		}
		if path, err := exec.LookPath(shell); err == nil {
			cmd := exec.Command(path, "-n")
			cmd.Stdin = strings.NewReader(out)
			if msg, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s -n rejects the script: %v\n%s", shell, err, msg)
			}
		}
	}
}

// TestCLIDocSamples: every sample of docs/CLI.md that shows an ibpath
// command line is its golden file (less the exit line), so the document
// cannot drift from the output.
func TestCLIDocSamples(t *testing.T) {
	doc, err := os.ReadFile("../../docs/CLI.md")
	if err != nil {
		t.Fatal(err)
	}
	golden := map[string]string{}
	files, err := filepath.Glob("testdata/*.golden")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if i := strings.LastIndex(text, "-- exit "); i >= 0 {
			text = text[:i]
		}
		golden[text] = f
	}
	blocks := strings.Split(string(doc), "```\n")
	n := 0
	for i := 1; i < len(blocks); i += 2 {
		if !strings.HasPrefix(blocks[i], "$ ibpath ") {
			continue
		}
		n++
		if _, ok := golden[blocks[i]]; !ok {
			t.Errorf("docs/CLI.md sample is no golden file's output:\n%s", blocks[i])
		}
	}
	if n < 10 {
		t.Errorf("docs/CLI.md has %d samples, want at least 10", n)
	}
}
