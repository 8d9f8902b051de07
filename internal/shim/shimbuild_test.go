package shim

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The shim's core is built once per set of build tags for the whole test
// binary, and its front once: a c-shared link takes seconds, and some
// twenty preload tests each need the library. Each test still gets a bed
// of its own (buildBed), with the two files linked (or copied) into its
// directory.
var shims struct {
	sync.Mutex
	dir   string            // made on first use, removed by TestMain
	built map[string]string // tags -> core
	front string
}

// TestMain removes the libraries built for the preload tests.
func TestMain(m *testing.M) {
	code := m.Run()
	shims.Lock()
	if shims.dir != "" {
		os.RemoveAll(shims.dir)
	}
	shims.Unlock()
	os.Exit(code)
}

// sharedShim is the shim's front (cmd/libibpath/front/build.sh) and its
// core built with tags (go build -buildmode=c-shared ./cmd/libibpath),
// each built on the first call that needs it.
func sharedShim(t testing.TB, tags []string) (front, core string) {
	t.Helper()
	key := strings.Join(tags, ",")
	shims.Lock()
	defer shims.Unlock()
	if shims.dir == "" {
		dir, err := os.MkdirTemp("", "ibpath-shim-test-")
		if err != nil {
			t.Fatalf("os.MkdirTemp: %v", err)
		}
		shims.dir, shims.built = dir, map[string]string{}
	}
	if shims.front == "" {
		front := filepath.Join(shims.dir, "libibpath-front.so")
		cmd := exec.Command("cmd/libibpath/front/build.sh", front)
		cmd.Dir = filepath.Join("..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("cmd/libibpath/front/build.sh: %v\n%s", err, out)
		}
		shims.front = front
	}
	if lib, ok := shims.built[key]; ok {
		return shims.front, lib
	}
	lib := filepath.Join(shims.dir, fmt.Sprintf("libibpath-core-%d.so", len(shims.built)))
	args := []string{"build", "-buildmode=c-shared", "-o", lib}
	if key != "" {
		args = append(args, "-tags", key)
	}
	cmd := exec.Command("go", append(args, "./cmd/libibpath")...)
	cmd.Dir = filepath.Join("..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	shims.built[key] = lib
	return shims.front, lib
}

// linkShim puts the library lib at path: a hard link, or a copy where the
// two directories are on different file systems.
func linkShim(lib, path string) error {
	if os.Link(lib, path) == nil {
		return nil
	}
	in, err := os.Open(lib)
	if err != nil {
		return fmt.Errorf("open the built shim: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return fmt.Errorf("create the bed's shim: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy the shim into the bed: %w", err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("close the bed's shim: %w", err)
	}
	return nil
}
