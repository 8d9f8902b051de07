package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestSimCommand(t *testing.T) {
	for _, args := range [][]string{{"ibpath", "sim", "--seed", "3"}, {"ibpath", "demo", "-v=false"}} {
		app := newApp()
		var out bytes.Buffer
		app.Writer, app.ErrWriter = &out, &out
		if err := app.Run(args); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out.String())
		}
		for _, want := range []string{"PATH_MIG", "layer 1: armed", "handed to layer 2"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%v: output lacks %q:\n%s", args, want, out.String())
			}
		}
	}
}

func TestUnknownFlag(t *testing.T) {
	app := newApp()
	var out bytes.Buffer
	app.Writer, app.ErrWriter = &out, &out
	if err := app.Run([]string{"ibpath", "sim", "--bogus"}); err == nil {
		t.Fatal("unknown flag accepted")
	}
}
