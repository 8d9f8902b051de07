# Build, install and package ibpath (README, "Install").
#
#   make                  build ibpathd, ibpath and the shim (libibpath.so
#                         and, on amd64 and arm64, libibpath-core.so) into build/
#   make install          install what `make` built, the man pages, the
#                         systemd unit, the D-Bus policy, the configuration
#                         and the docs under $(DESTDIR)$(PREFIX)
#                         (PREFIX=/usr/local by default); it builds nothing,
#                         so that `sudo make install` needs no Go toolchain
#   make package          dist/*.deb and dist/*.rpm, made by nfpm
#                         (packaging/) from `make install PREFIX=/usr`
#   make clean            remove build/ and dist/
#
# The version comes from scripts/version (git describe; IBPATH_VERSION
# overrides it) and is linked into all three programs.

GO ?= go
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR ?= $(PREFIX)/bin
SBINDIR ?= $(PREFIX)/sbin
LIBDIR ?= $(PREFIX)/lib
MANDIR ?= $(PREFIX)/share/man
DOCDIR ?= $(PREFIX)/share/doc/ibpath
UNITDIR ?= $(PREFIX)/lib/systemd/system
# ibpathd reads /etc/ibpath/ibpathd.conf whatever the prefix.
SYSCONFDIR ?= /etc
# dbus-daemon reads the system bus policies of /usr/share/dbus-1/system.d
# and /etc/dbus-1/system.d, nothing under /usr/local.
ifeq ($(PREFIX),/usr)
DBUSDIR ?= /usr/share/dbus-1/system.d
else
DBUSDIR ?= $(SYSCONFDIR)/dbus-1/system.d
endif

VERSION := $(shell scripts/version)
ifneq ($(.SHELLSTATUS),0)
$(error scripts/version failed (its message is above))
endif
STAMP := $(shell scripts/version --ldflags)
ARCH := $(shell $(GO) env GOARCH)

STAGE := build/stage
NFPM := build/nfpm

.PHONY: all build install package clean

all: build

build:
	mkdir -p build
	$(GO) build -ldflags "-s -w $(STAMP)" -o build/ibpathd ./cmd/ibpathd
	$(GO) build -ldflags "-s -w $(STAMP)" -o build/ibpath ./cmd/ibpath
	cmd/libibpath/build.sh build/libibpath.so

BUILT := build/ibpathd build/ibpath build/libibpath.so
# the shim's front loads its core (cmd/libibpath/build.sh); elsewhere the
# core alone is libibpath.so
ifneq ($(filter amd64 arm64,$(ARCH)),)
BUILT += build/libibpath-core.so
endif

install:
	@for f in $(BUILT); do \
		[ -f $$f ] || { echo "$$f is missing: run make first" >&2; exit 1; }; \
	done
	install -d $(DESTDIR)$(SBINDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/ibpath \
		$(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(DOCDIR) \
		$(DESTDIR)$(UNITDIR) $(DESTDIR)$(DBUSDIR) $(DESTDIR)$(SYSCONFDIR)/ibpath
	install -m 0755 build/ibpathd $(DESTDIR)$(SBINDIR)/ibpathd
	install -m 0755 build/ibpath $(DESTDIR)$(BINDIR)/ibpath
	install -m 0755 build/libibpath.so $(DESTDIR)$(LIBDIR)/ibpath/libibpath.so
	$(if $(filter build/libibpath-core.so,$(BUILT)),install -m 0755 build/libibpath-core.so $(DESTDIR)$(LIBDIR)/ibpath/libibpath-core.so)
	gzip -9n < docs/man/ibpath.1 > $(DESTDIR)$(MANDIR)/man1/ibpath.1.gz
	gzip -9n < docs/man/ibpathd.8 > $(DESTDIR)$(MANDIR)/man8/ibpathd.8.gz
	chmod 0644 $(DESTDIR)$(MANDIR)/man1/ibpath.1.gz $(DESTDIR)$(MANDIR)/man8/ibpathd.8.gz
	install -m 0644 README.md docs/*.md $(DESTDIR)$(DOCDIR)/
	sed -e 's|/usr/sbin/ibpathd|$(SBINDIR)/ibpathd|' -e 's|/usr/share/doc/ibpath/|$(DOCDIR)/|' \
		contrib/systemd/ibpathd.service > $(DESTDIR)$(UNITDIR)/ibpathd.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/ibpathd.service
	install -m 0644 contrib/dbus/org.ibpath.Daemon1.conf $(DESTDIR)$(DBUSDIR)/
	@# an existing configuration is the administrator's: kept
	if [ -e $(DESTDIR)$(SYSCONFDIR)/ibpath/ibpathd.conf ]; then \
		echo "kept $(DESTDIR)$(SYSCONFDIR)/ibpath/ibpathd.conf (contrib/ibpathd.conf is the shipped one)"; \
	else \
		install -m 0644 contrib/ibpathd.conf $(DESTDIR)$(SYSCONFDIR)/ibpath/ibpathd.conf; \
	fi
	@if [ -z "$(DESTDIR)" ] && ! getent group ibpath >/dev/null; then \
		echo "note: the configuration names the operators' group ibpath, which does not exist: groupadd --system ibpath"; \
	fi

$(NFPM): packaging/tools/go.mod packaging/tools/go.sum
	mkdir -p build
	cd packaging/tools && $(GO) build -o $(CURDIR)/$(NFPM) github.com/goreleaser/nfpm/v2/cmd/nfpm

package: build $(NFPM)
	rm -rf $(STAGE)
	$(MAKE) install DESTDIR=$(CURDIR)/$(STAGE) PREFIX=/usr
	mkdir -p dist
	rm -f dist/*.deb dist/*.rpm
	for p in deb rpm; do \
		VERSION=$(VERSION) ARCH=$(ARCH) STAGE=$(CURDIR)/$(STAGE) \
			$(NFPM) package --config packaging/nfpm.yaml --packager $$p --target dist/ || exit 1; \
	done

clean:
	rm -rf build dist
