package fail

import (
	"fmt"
	"testing"
)

func TestGood(t *testing.T) {}

func TestBad(t *testing.T) {
	t.Log("before the check")
	fmt.Println("printed to stdout")
	t.Errorf("got %d, want %d\nsecond line", 1, 2)
}

func TestNested(t *testing.T) {
	t.Log("parent log")
	t.Run("ok", func(t *testing.T) { t.Log("hidden") })
	t.Run("broken", func(t *testing.T) {
		t.Run("deep", func(t *testing.T) { t.Fatal("deep failure") })
		t.Log("after deep")
	})
	t.Log("parent after")
}
