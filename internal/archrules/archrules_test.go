package archrules

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/ibpath/ibpath"

// row is a package row of ARCHITECTURE.md's table: the packages it names
// (a row may name two) and its imports column.
type row struct {
	pkgs    []string
	imports string
}

// pkg is a package of the tree as built for this platform.
type pkg struct {
	path    string   // relative to the module: "verbs/sim"
	imports []string // of its non-test files
	gostmts []string // "file:line" of each go statement in them
}

var backticked = regexp.MustCompile("`([^`]+)`")

// readTable parses the "## Packages" table of the architecture document.
func readTable(doc string) ([]row, error) {
	var rows []row
	in := false
	sc := bufio.NewScanner(strings.NewReader(doc))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## Packages"
		case in && strings.HasPrefix(line, "| `"):
			cells := strings.Split(line, " | ")
			if len(cells) < 4 {
				return nil, fmt.Errorf("a table row with %d cells: %.60s", len(cells), line)
			}
			var r row
			for _, m := range backticked.FindAllStringSubmatch(cells[0], -1) {
				r.pkgs = append(r.pkgs, m[1])
			}
			r.imports = cells[2]
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("no package table under \"## Packages\"")
	}
	return rows, sc.Err()
}

// readTree lists the module's packages below root with their imports and
// go statements (non-test files, this platform's build constraints).
func readTree(root string) ([]pkg, error) {
	var pkgs []pkg
	err := filepath.WalkDir(root, func(dir string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		name := d.Name()
		if dir != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "lab") {
			return filepath.SkipDir
		}
		bp, err := build.Default.ImportDir(dir, 0)
		if _, ok := err.(*build.NoGoError); ok {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read package %s: %w", dir, err)
		}
		rel, _ := filepath.Rel(root, dir)
		p := pkg{path: filepath.ToSlash(rel), imports: bp.Imports}
		fset := token.NewFileSet()
		for _, f := range append(append([]string{}, bp.GoFiles...), bp.CgoFiles...) {
			af, err := parser.ParseFile(fset, filepath.Join(dir, f), nil, parser.SkipObjectResolution)
			if err != nil {
				return fmt.Errorf("parse %s: %w", f, err)
			}
			ast.Inspect(af, func(n ast.Node) bool {
				if g, ok := n.(*ast.GoStmt); ok {
					pos := fset.Position(g.Pos())
					p.gostmts = append(p.gostmts, fmt.Sprintf("%s/%s:%d", p.path, f, pos.Line))
				}
				return true
			})
		}
		pkgs = append(pkgs, p)
		return nil
	})
	return pkgs, err
}

// The rules under the table.
var (
	stdOnly = []string{"verbs"}
	pure    = "fsm"
	// impure is what a pure package may not import: I/O, clocks,
	// randomness, locks (a prefix match, so os/exec and sync/atomic too)
	impure       = []string{"os", "net", "io", "bufio", "time", "math/rand", "crypto/rand", "sync", "syscall", "log"}
	noGoroutines = []string{"verbs/sim", "fsm", "pathsel", "apm", "crossnic"}
)

// isStd: the import path has no dot in its first element and is not "C".
func isStd(imp string) bool {
	first, _, _ := strings.Cut(imp, "/")
	return imp != "C" && !strings.Contains(first, ".")
}

// named: a third-party import is named in an imports column when one of
// its path's elements after the host is a word of the column ("rdmamap"
// for github.com/Mellanox/rdmamap, "Prometheus" for
// github.com/prometheus/common/expfmt); cgo when the column names the C
// library (libibverbs) or cgo.
func named(imp, column string) bool {
	words := map[string]bool{}
	for _, w := range strings.FieldsFunc(strings.ToLower(column), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-')
	}) {
		words[w] = true
	}
	if imp == "C" {
		return words["libibverbs"] || words["cgo"]
	}
	parts := strings.Split(strings.ToLower(imp), "/")
	for _, p := range parts[1:] {
		if words[p] {
			return true
		}
	}
	return false
}

func has(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// check returns every way the tree departs from the table and the rules.
func check(rows []row, pkgs []pkg) []string {
	var bad []string
	column := map[string]string{}
	for _, r := range rows {
		for _, p := range r.pkgs {
			if _, dup := column[p]; dup {
				bad = append(bad, fmt.Sprintf("%s: two rows in the table", p))
			}
			column[p] = r.imports
		}
	}
	seen := map[string]bool{}
	for _, p := range pkgs {
		seen[p.path] = true
		col, ok := column[p.path]
		if !ok {
			bad = append(bad, fmt.Sprintf("%s: no row in the table", p.path))
			continue
		}
		allowed := map[string]bool{}
		for _, m := range backticked.FindAllStringSubmatch(col, -1) {
			allowed[m[1]] = true
		}
		for _, imp := range p.imports {
			switch rel, ours := strings.CutPrefix(imp, module+"/"); {
			case ours:
				if !allowed[rel] {
					bad = append(bad, fmt.Sprintf("%s imports %s, which its row does not name", p.path, rel))
				}
			case isStd(imp):
				if p.path == pure {
					for _, i := range impure {
						if imp == i || strings.HasPrefix(imp, i+"/") {
							bad = append(bad, fmt.Sprintf("%s imports %s: it stays free of I/O, clocks, randomness and locks", p.path, imp))
						}
					}
				}
			default:
				if has(stdOnly, p.path) || p.path == pure {
					bad = append(bad, fmt.Sprintf("%s imports %s: it imports only the standard library", p.path, imp))
				} else if !named(imp, col) {
					bad = append(bad, fmt.Sprintf("%s imports %s, which its row does not name", p.path, imp))
				}
			}
		}
		if has(stdOnly, p.path) && strings.TrimSpace(col) != "std" {
			bad = append(bad, fmt.Sprintf("%s: its row's imports must say std", p.path))
		}
		if has(noGoroutines, p.path) {
			for _, g := range p.gostmts {
				bad = append(bad, fmt.Sprintf("%s starts a goroutine (%s)", p.path, g))
			}
		}
	}
	for _, r := range rows {
		for _, p := range r.pkgs {
			if !seen[p] {
				bad = append(bad, fmt.Sprintf("%s: in the table, not in the tree", p))
			}
		}
	}
	sort.Strings(bad)
	return bad
}

// TestTreeIsAsDocumented holds the tree to docs/ARCHITECTURE.md.
func TestTreeIsAsDocumented(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatalf("read the architecture document: %v", err)
	}
	rows, err := readTable(string(doc))
	if err != nil {
		t.Fatalf("docs/ARCHITECTURE.md: %v", err)
	}
	pkgs, err := readTree(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 20 {
		t.Fatalf("%d packages found under %s: not the tree", len(pkgs), root)
	}
	for _, b := range check(rows, pkgs) {
		t.Errorf("docs/ARCHITECTURE.md: %s", b)
	}
}

// TestCheckFindsEachDeparture: the check reports each kind of departure
// planted in a small table and tree, and nothing on the clean one.
func TestCheckFindsEachDeparture(t *testing.T) {
	rows := []row{
		{[]string{"verbs"}, "std"},
		{[]string{"fsm"}, "std"},
		{[]string{"apm"}, "`verbs`, `fsm`"},
		{[]string{"pathsel"}, "`verbs`, rdmamap"},
		{[]string{"verbs/ibv"}, "`verbs`, libibverbs"},
		{[]string{"cmd/a", "cmd/b"}, "`apm`"},
	}
	clean := []pkg{
		{path: "verbs", imports: []string{"errors", "sync"}},
		{path: "fsm", imports: []string{"fmt"}},
		{path: "apm", imports: []string{module + "/verbs", module + "/fsm", "time"}},
		{path: "pathsel", imports: []string{module + "/verbs", "github.com/Mellanox/rdmamap"}},
		{path: "verbs/ibv", imports: []string{module + "/verbs", "C"}},
		{path: "cmd/a", imports: []string{module + "/apm"}},
		{path: "cmd/b", imports: []string{module + "/apm"}},
	}
	if bad := check(rows, clean); len(bad) != 0 {
		t.Fatalf("the clean tree: %q", bad)
	}
	for _, c := range []struct {
		name string
		edit func([]pkg) []pkg
		want string
	}{
		{"an import the row does not name", func(p []pkg) []pkg {
			p[2].imports = append(p[2].imports, module+"/crossnic")
			return p
		}, "apm imports crossnic, which its row does not name"},
		{"a third-party import the row does not name", func(p []pkg) []pkg {
			p[3].imports = append(p[3].imports, "go.etcd.io/bbolt")
			return p
		}, "pathsel imports go.etcd.io/bbolt, which its row does not name"},
		{"cgo where the row names no C library", func(p []pkg) []pkg {
			p[2].imports = append(p[2].imports, "C")
			return p
		}, "apm imports C, which its row does not name"},
		{"verbs beyond the standard library", func(p []pkg) []pkg {
			p[0].imports = append(p[0].imports, "golang.org/x/sys/unix")
			return p
		}, "verbs imports golang.org/x/sys/unix: it imports only the standard library"},
		{"a clock in fsm", func(p []pkg) []pkg {
			p[1].imports = append(p[1].imports, "time")
			return p
		}, "fsm imports time: it stays free of I/O, clocks, randomness and locks"},
		{"a lock in fsm", func(p []pkg) []pkg {
			p[1].imports = append(p[1].imports, "sync/atomic")
			return p
		}, "fsm imports sync/atomic: it stays free of I/O, clocks, randomness and locks"},
		{"a goroutine in apm", func(p []pkg) []pkg {
			p[2].gostmts = []string{"apm/m.go:7"}
			return p
		}, "apm starts a goroutine (apm/m.go:7)"},
		{"a package without a row", func(p []pkg) []pkg {
			return append(p, pkg{path: "internal/new"})
		}, "internal/new: no row in the table"},
		{"a row without a package", func(p []pkg) []pkg {
			return p[:len(p)-1]
		}, "cmd/b: in the table, not in the tree"},
	} {
		tree := c.edit(clonePkgs(clean))
		if bad := check(rows, tree); len(bad) != 1 || bad[0] != c.want {
			t.Errorf("%s: %q, want %q", c.name, bad, c.want)
		}
	}
	stdless := append([]row{}, rows...)
	stdless[0] = row{[]string{"verbs"}, "`fsm`"}
	if bad := check(stdless, clean); len(bad) != 1 || bad[0] != "verbs: its row's imports must say std" {
		t.Errorf("a row of verbs naming more than std: %q", bad)
	}
}

func clonePkgs(ps []pkg) []pkg {
	out := make([]pkg, len(ps))
	for i, p := range ps {
		out[i] = pkg{path: p.path, imports: append([]string{}, p.imports...), gostmts: append([]string{}, p.gostmts...)}
	}
	return out
}

// TestReadTable reads the rows of the package table and no other table.
func TestReadTable(t *testing.T) {
	doc := "# x\n\n| layer | a | b | c |\n|---|---|---|---|\n| `1. APM` | a | b | c |\n\n## Packages\n\n" +
		"| package | owns | imports | state |\n|---|---|---|---|\n" +
		"| `verbs` | the surface | std | done |\n| `cmd/a`, `cmd/b` | mains | `internal/api` | done |\n\n## Next\n\n| `x` | y | z | w |\n"
	rows, err := readTable(doc)
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(rows)
	if want := "[{[verbs] std} {[cmd/a cmd/b] `internal/api`}]"; got != want {
		t.Fatalf("rows %s, want %s", got, want)
	}
	if _, err := readTable("# no table\n"); err == nil {
		t.Fatal("a document without the table read as one")
	}
}
