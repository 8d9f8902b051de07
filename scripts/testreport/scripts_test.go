package main

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestFindScripts(t *testing.T) {
	root := writeTree(t, map[string]string{
		"test.sh":              "#!/usr/bin/env bash\n",
		"lib/helpers.sh":       "# shellcheck shell=bash\nf() { :; }\n",
		".ci/run":              "#!/usr/bin/env bash\nset -e\n",
		"lab/initramfs/init":   "#!/bin/busybox sh\n",
		"lab/stage2":           "#!/bin/bash\n",
		"lab/posix":            "#! /bin/sh -e\n",
		"lab/env-s":            "#!/usr/bin/env -S bash -e\n",
		"lab/report.py":        "print(1)\n",
		"scripts/mutants":      "#!/usr/bin/env python3\n",
		"scripts/old":          "#!/usr/bin/python2.7\n",
		"scripts/zsh-only":     "#!/bin/zsh\n",
		"scripts/notes":        "just text\n",
		"scripts/empty":        "",
		"go/main.go":           "package main\n",
		".git/hooks/pre.sh":    "#!/bin/sh\n",
		".cache/x.py":          "#!/usr/bin/env python3\n",
		"pkg/testdata/bad.sh":  "#!/bin/sh\n",
		"pkg/testdata/bad.py":  "x = (\n",
		"bin/shim.so":          "\x7fELF\x02\x01\x01",
		"lab/bash-named-a-dir": "#!/usr/bin/env bashful\n",
	})
	shell, err := findScripts(root, kindShell)
	if err != nil {
		t.Fatal(err)
	}
	wantShell := []string{".ci/run", "lab/env-s", "lab/initramfs/init", "lab/posix", "lab/stage2", "lib/helpers.sh", "test.sh"}
	if !reflect.DeepEqual(shell, wantShell) {
		t.Errorf("shell scripts %q\nwant %q", shell, wantShell)
	}
	python, err := findScripts(root, kindPython)
	if err != nil {
		t.Fatal(err)
	}
	wantPython := []string{"lab/report.py", "scripts/mutants", "scripts/old"}
	if !reflect.DeepEqual(python, wantPython) {
		t.Errorf("python scripts %q\nwant %q", python, wantPython)
	}
}

// A file that cannot be read is an error naming it, not a file passed over.
func TestInterpreterReadError(t *testing.T) {
	dir := t.TempDir()
	if _, err := interpreter(dir); err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("interpreter(a directory) = %v, want an error naming it", err)
	}
	missing := filepath.Join(dir, "missing")
	if _, err := interpreter(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("interpreter(a missing file) = %v, want an error naming it", err)
	}
}

func TestInterpreter(t *testing.T) {
	for body, want := range map[string]string{
		"#!/bin/bash\necho":                    "bash",
		"#!/usr/bin/env bash":                  "bash",
		"#! /usr/bin/env -S bash -eu":          "bash",
		"#!/bin/busybox sh":                    "sh",
		"#!/usr/bin/python3 -u":                "python3",
		"#!":                                   "",
		"#!/usr/bin/env":                       "",
		"echo no shebang":                      "",
		"":                                     "",
		"\n#!/bin/sh second line":              "",
		"#!/bin/sh" + strings.Repeat(" ", 300): "sh",
	} {
		p := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := interpreter(p)
		if err != nil || got != want {
			t.Errorf("interpreter(%q) = %q, %v; want %q", body, got, err, want)
		}
	}
}

// The checks of ./test.sh reach the scripts the tree has: the lab's
// (those without an extension too), test.sh, .ci/run and scripts/.
func TestTreeScripts(t *testing.T) {
	shell, err := findScripts("../..", kindShell)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"test.sh", ".ci/run", "lab/run.sh", "lab/initramfs/init", "lab/guest/lib.sh", "lab/test/rows_test.sh"} {
		if !slices.Contains(shell, want) {
			t.Errorf("shell scripts of the tree lack %s: %q", want, shell)
		}
	}
	python, err := findScripts("../..", kindPython)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"lab/report.py", "lab/monitor.py", "scripts/mutants"} {
		if !slices.Contains(python, want) {
			t.Errorf("python scripts of the tree lack %s: %q", want, python)
		}
	}
	for _, p := range append(shell, python...) {
		if strings.Contains(p, "testdata/") {
			t.Errorf("%s is a fixture, not a script of the tree", p)
		}
	}
}
