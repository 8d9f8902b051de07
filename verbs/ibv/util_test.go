//go:build linux && cgo

package ibv

import (
	"os"
	"unsafe"
)

func ptrOf(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

// labEnabled reports whether the lab tests run (IBPATH_LAB=1, inside a
// guest with rxe devices).
func labEnabled() bool { return os.Getenv("IBPATH_LAB") == "1" }
