package main

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/man/ibpathd.8 from the flags")

const manPath = "../../docs/man/ibpathd.8"

// manDescription is the body of ibpathd(8)'s DESCRIPTION (markdown, as
// urfave/cli renders it), manTail its sections after the options (roff):
// the files and the operators' group as the packages install them
// (Makefile, packaging/).
const manDescription = `ibpathd is the ibpath daemon, one per node. It discovers the node's HCAs and ports (or runs the
embedded simulated fabric when there are none, and says so), keeps the node's status, relays arm and
migrate to the processes that own QPs, keeps their backup attributes in a local store replicated to
the other nodes, and serves the local API that **ibpath**(1) speaks, a D-Bus facade and Prometheus
metrics. Applications never depend on it: the LD_PRELOAD shim libibpath keeps running without it.

ibpathd runs as root; the unit ibpathd.service starts it under systemd as a Type=notify service.
Every option can be given as a flag or as a "key = value" line of the configuration file (the key is
the flag's long name, # starts a comment); the command line wins over the file.`

const manTail = `
.SH FILES
.TP
.I /etc/ibpath/ibpathd.conf
The configuration file (\fB--config\fP). The packages install a commented one that starts as
shipped: standalone (replication off), with the group ibpath as operators.
.TP
.I /etc/ibpath/cluster.key
The cluster key replication needs (\fB--cluster-key-file\fP), mode 0600.
.TP
.I /run/ibpath/ibpathd.sock
The local API socket (\fB--socket\fP).
.TP
.I /var/lib/ibpath
The store, store.db, and the peers to rejoin after a restart (\fB--state-dir\fP).
.TP
.I /usr/lib/ibpath/libibpath.so
The shim, for LD_PRELOAD.
.TP
.I /usr/lib/ibpath/libibpath-core.so
The shim's core, which libibpath.so loads (not with IBPATH_DISABLE=1).
.TP
.I /usr/share/doc/ibpath
DAEMON.md (this daemon in full), SECURITY.md (who may do what), CLI.md, SHIM.md, REPLICATION.md.

.SH OPERATORS
The packages create the system group ibpath, and the shipped configuration names it
(\fBoperator = @ibpath\fP): its members may arm and migrate every QP of the node, as root may.
Other users act on the QPs of their own processes only.

.SH SEE ALSO
\fBibpath\fP(1), \fBsystemctl\fP(1)
`

// manPage renders ibpathd(8) from the daemon's app, so that its options
// are the real flags.
func manPage() (string, error) {
	app := newApp()
	app.Description = manDescription
	app.UsageText = "ibpathd [OPTIONS]"
	page, err := app.ToManWithSection(8)
	if err != nil {
		return "", err
	}
	return strings.Replace(page, ".SH GLOBAL OPTIONS", ".SH OPTIONS", 1) + manTail, nil
}

// TestManPageFresh fails when docs/man/ibpathd.8 is not the page the
// flags give (run go test ./cmd/ibpathd -run ManPage -update to
// regenerate it).
func TestManPageFresh(t *testing.T) {
	page, err := manPage()
	if err != nil {
		t.Fatal(err)
	}
	for _, fl := range flags() {
		if name := fl.Names()[0]; !strings.Contains(page, `\fB--`+name+`\fP`) {
			t.Errorf("ibpathd(8) lacks --%s", name)
		}
	}
	for _, want := range []string{".TH ibpathd 8", "/etc/ibpath/ibpathd.conf", "operator = @ibpath", ".SH OPTIONS", ".SH FILES", ".SH SEE ALSO"} {
		if !strings.Contains(page, want) {
			t.Errorf("ibpathd(8) lacks %q", want)
		}
	}
	if *update {
		if err := os.WriteFile(manPath, []byte(page), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	committed, err := os.ReadFile(manPath)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/ibpathd -run ManPage -update to generate it)", err)
	}
	if string(committed) != page {
		t.Errorf("%s is stale: run go test ./cmd/ibpathd -run ManPage -update and commit it", manPath)
	}
}
