package build

import "testing"

func TestX(t *testing.T) { var x int = "no" }
