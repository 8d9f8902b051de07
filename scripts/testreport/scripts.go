package main

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Kinds of script that findScripts looks for.
const (
	kindShell  = "shell"
	kindPython = "python"
)

// shells are the interpreters whose scripts shellcheck reads (busybox sh
// is ash, which it checks as dash).
var shells = map[string]bool{"sh": true, "bash": true, "dash": true, "ksh": true, "ash": true}

// findScripts lists the scripts of a kind under root, as slash-separated
// paths relative to root, sorted: shell scripts are the files named *.sh
// and those whose #! line names a shell (directly, through env, or as
// `busybox sh`); Python ones are *.py and those whose #! line names a
// python. Hidden directories other than .ci, and testdata directories
// (fixtures, not code), are not searched.
func findScripts(root, kind string) ([]string, error) {
	var ext string
	var interp func(string) bool
	switch kind {
	case kindShell:
		ext, interp = ".sh", func(name string) bool { return shells[name] }
	case kindPython:
		ext, interp = ".py", func(name string) bool {
			return name == "python" || strings.HasPrefix(name, "python3") || strings.HasPrefix(name, "python2")
		}
	default:
		return nil, fmt.Errorf("unknown script kind %q (want %s or %s)", kind, kindShell, kindPython)
	}
	var found []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("walk %s: %w", p, err)
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (name == "testdata" || (strings.HasPrefix(name, ".") && name != ".ci")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		match := strings.HasSuffix(name, ext)
		if !match {
			i, err := interpreter(p)
			if err != nil {
				return err
			}
			match = i != "" && interp(i)
		}
		if match {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return fmt.Errorf("relative path of %s: %w", p, err)
			}
			found = append(found, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(found)
	return found, nil
}

// interpreter is the program a file's #! line runs ("bash" for
// "#!/usr/bin/env bash", "sh" for "#!/bin/busybox sh"), or "" when the
// file has no #! line.
func interpreter(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", p, err)
	}
	defer f.Close()
	head := make([]byte, 256)
	n, err := io.ReadFull(f, head)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return "", fmt.Errorf("read %s: %w", p, err)
	}
	head = head[:n]
	if !bytes.HasPrefix(head, []byte("#!")) {
		return "", nil
	}
	if i := bytes.IndexByte(head, '\n'); i >= 0 {
		head = head[:i]
	}
	fields := strings.Fields(string(head[2:]))
	for len(fields) > 0 {
		switch path.Base(fields[0]) {
		case "env", "busybox":
			fields = fields[1:]
			for len(fields) > 0 && strings.HasPrefix(fields[0], "-") {
				fields = fields[1:] // env -S and the like
			}
			continue
		}
		return path.Base(fields[0]), nil
	}
	return "", nil
}
