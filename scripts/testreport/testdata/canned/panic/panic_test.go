package panic

import "testing"

func TestBefore(t *testing.T) {}

func TestPanics(t *testing.T) {
	t.Log("about to panic")
	var m map[string]int
	m["x"] = 1
}

func TestAfter(t *testing.T) {}
