// Package version owns the identity of a build of ibpath: its semantic
// version and the VCS revision it was built from. ibpathd, the ibpath CLI
// and the libibpath shim all report it from here (--version, the status,
// the ibpath_build_info metric, the shim's banner).
//
// The build sets it with the linker (`-ldflags "-X ..."`, as the Makefile
// and cmd/libibpath/build.sh do with what scripts/version prints); a
// build without those flags falls back to what the Go toolchain recorded
// (debug.ReadBuildInfo: the main module's version and the vcs.revision
// and vcs.modified settings), and to "dev" when it recorded none.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Set by the linker: -X github.com/ibpath/ibpath/internal/version.version=0.4.0
// (and .revision=<commit>, .modified=true|false). scripts/version prints
// these flags.
var (
	version  string
	revision string
	modified string
)

// Dev is the version of a build that carries none.
const Dev = "dev"

// Info is what a build says of itself.
type Info struct {
	// Version is the semantic version without a leading "v" (0.4.0,
	// 0.4.1-dev.3+g1a2b3c4d5e6f for a commit after the tag v0.4.0,
	// 0.0.0-dev when the repository has no tag), or Dev.
	Version string
	// Revision is the VCS commit the build came from; empty when unknown.
	Revision string
	// Modified: the working tree had uncommitted changes.
	Modified bool
	// GoVersion is the Go toolchain that built it (runtime.Version()).
	GoVersion string
}

// Get returns this binary's build information.
func Get() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return resolve(linked{version: version, revision: revision, modified: modified}, bi, runtime.Version())
}

// linked is what the linker set.
type linked struct{ version, revision, modified string }

// resolve prefers what the linker set, field by field, then the build
// information the toolchain recorded (bi may be nil), then Dev.
func resolve(l linked, bi *debug.BuildInfo, goVersion string) Info {
	in := Info{Version: l.version, Revision: l.revision, Modified: l.modified == "true", GoVersion: goVersion}
	if bi == nil {
		if in.Version == "" {
			in.Version = Dev
		}
		return in
	}
	if in.Version == "" {
		// "(devel)" is what the toolchain records for a module built
		// from its own tree without VCS information.
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			in.Version = strings.TrimPrefix(v, "v")
		} else {
			in.Version = Dev
		}
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if l.revision == "" {
				in.Revision = s.Value
			}
		case "vcs.modified":
			if l.modified == "" {
				in.Modified = s.Value == "true"
			}
		}
	}
	return in
}

// ShortRevision is the revision's first 12 characters (all of it if
// shorter).
func (i Info) ShortRevision() string {
	if len(i.Revision) > 12 {
		return i.Revision[:12]
	}
	return i.Revision
}

// String is the version with what else is known, as --version prints it:
// "0.4.0 (revision 1a2b3c4d5e6f, modified, go1.26.0)".
func (i Info) String() string {
	var more []string
	if r := i.ShortRevision(); r != "" {
		more = append(more, "revision "+r)
	}
	if i.Modified {
		more = append(more, "modified")
	}
	if i.GoVersion != "" {
		more = append(more, i.GoVersion)
	}
	if len(more) == 0 {
		return i.Version
	}
	return fmt.Sprintf("%s (%s)", i.Version, strings.Join(more, ", "))
}
