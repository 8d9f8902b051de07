// Command show prints what internal/version says of its own build, one
// field a line; the package's tests build it with and without the
// linker flags of scripts/version.
package main

import (
	"fmt"

	"github.com/ibpath/ibpath/internal/version"
)

func main() {
	v := version.Get()
	fmt.Printf("version=%s\nrevision=%s\nmodified=%t\n", v.Version, v.Revision, v.Modified)
}
