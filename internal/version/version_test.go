package version

import (
	"runtime/debug"
	"testing"
)

func TestResolve(t *testing.T) {
	stamped := &debug.BuildInfo{Main: debug.Module{Path: "github.com/ibpath/ibpath", Version: "v0.4.1-0.20250314092653-1a2b3c4d5e6f+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "1a2b3c4d5e6f7a8b"}, {Key: "vcs.modified", Value: "true"}}}
	devel := &debug.BuildInfo{Main: debug.Module{Path: "github.com/ibpath/ibpath", Version: "(devel)"}}
	for _, tc := range []struct {
		name string
		l    linked
		bi   *debug.BuildInfo
		want Info
	}{
		{"linker flags win", linked{"0.4.0", "feedface", "false"}, stamped, Info{Version: "0.4.0", Revision: "feedface", GoVersion: "go1.x"}},
		{"linker version, toolchain revision", linked{version: "0.4.0"}, stamped, Info{Version: "0.4.0", Revision: "1a2b3c4d5e6f7a8b", Modified: true, GoVersion: "go1.x"}},
		{"toolchain only", linked{}, stamped, Info{Version: "0.4.1-0.20250314092653-1a2b3c4d5e6f+dirty", Revision: "1a2b3c4d5e6f7a8b", Modified: true, GoVersion: "go1.x"}},
		{"(devel) is no version", linked{}, devel, Info{Version: Dev, GoVersion: "go1.x"}},
		{"no build information", linked{}, nil, Info{Version: Dev, GoVersion: "go1.x"}},
		{"no build information, linker flags", linked{"1.0.0", "abc", "true"}, nil, Info{Version: "1.0.0", Revision: "abc", Modified: true, GoVersion: "go1.x"}},
	} {
		if got := resolve(tc.l, tc.bi, "go1.x"); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestString(t *testing.T) {
	for _, tc := range []struct {
		in   Info
		want string
	}{
		{Info{Version: "0.4.0", Revision: "1a2b3c4d5e6f7a8b9c", Modified: true, GoVersion: "go1.26.0"}, "0.4.0 (revision 1a2b3c4d5e6f, modified, go1.26.0)"},
		{Info{Version: "0.4.0", Revision: "abc", GoVersion: "go1.26.0"}, "0.4.0 (revision abc, go1.26.0)"},
		{Info{Version: Dev, GoVersion: "go1.26.0"}, "dev (go1.26.0)"},
		{Info{Version: Dev}, "dev"},
	} {
		if got := tc.in.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.in, got, tc.want)
		}
	}
}
