# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# make            build the BPF object, its skeleton, egressd and egressctl
# make deps       install the Debian packages the build and tests need
# make test       deps + build + unit, integration, BPF, fuzz smoke and end-to-end
#                 tests (root; docs/testing.md)
# make test-bpf   tests/bpf: the BPF decisions run in the kernel (root)
# make test-kernels  the kernel-dependent tests in QEMU guests of Debian 12's
#                 6.1 and 6.12 (KERNELS=...), under systemd (root; docs/testing.md)
# make test-asan  the same tests against an ASan/UBSan build
# make demo       a sandboxed command with one allowed and one denied connection
# make bench      benchmarks, written into docs/benchmarks.md (installs tinyproxy, gnuplot)
# make vmlinux    regenerate vmlinux/vmlinux.h from this host's BTF
# make install    install into $(DESTDIR)$(PREFIX) (default /usr/local; paths below)
# make deb        a Debian package (PREFIX=/usr) in $(OUT)/; tools/check-deb tries it
# make image      the container image (Containerfile) with podman; not part
#                 of `make test` (tools/image-check builds and checks it)
# make install-oci-hooks  the OCI hooks.d files (docs/containers.md)

OUT      ?= build
CLANG    ?= clang
BPFTOOL  ?= bpftool
CC       ?= gcc
ARCH     := $(shell uname -m | sed 's/x86_64/x86/;s/aarch64/arm64/')
VERSION  := 0.1.0

# Sanitizer builds go to their own tree so they never mix with the normal one.
ifeq ($(SAN),1)
OUT      := build-asan
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
endif

WARN     := -Wall -Wextra -Werror -Wundef -Wno-unused-parameter -Wno-format-truncation
CFLAGS   := -std=gnu11 -g -O2 $(WARN) $(SANFLAGS) -Iinclude -Iuser/lib -I$(OUT) \
	    -DEGRESSD_VERSION='"$(VERSION)"' -D_GNU_SOURCE
LDFLAGS  := $(SANFLAGS)
LIBS     := -lbpf -lelf -lz -ljansson -lcrypto -lseccomp -lm -lmicrohttpd -lmnl

# Install paths (docs/operations.md). PREFIX=/usr is a distribution's layout:
# /etc, /lib/systemd/system and /usr/lib/sysusers.d; any other
# prefix keeps everything under it (systemd reads /usr/local/lib/systemd/system
# and /usr/local/lib/sysusers.d too).
PREFIX      ?= /usr/local
SBINDIR     ?= $(PREFIX)/sbin
BINDIR      ?= $(PREFIX)/bin
DATADIR     ?= $(PREFIX)/share
MANDIR      ?= $(DATADIR)/man
DOCDIR      ?= $(DATADIR)/doc/egressd
BASHCOMPDIR ?= $(DATADIR)/bash-completion/completions
ifeq ($(PREFIX),/usr)
SYSCONFDIR  ?= /etc
UNITDIR     ?= /lib/systemd/system
SYSUSERSDIR ?= /usr/lib/sysusers.d
else
SYSCONFDIR  ?= $(PREFIX)/etc
UNITDIR     ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
endif
INSTALL     ?= install

BPF_CFLAGS := -g -O2 -target bpf -D__TARGET_ARCH_$(ARCH) -Wall -Werror -Wundef \
	      -Iinclude -Ivmlinux -I$(OUT)

LIB_SRCS  := $(sort $(wildcard user/lib/*.c user/lib/*/*.c))
D_SRCS    := $(sort $(wildcard user/egressd/*.c user/egressd/*/*.c))
CTL_SRCS  := $(sort $(wildcard user/egressctl/*.c))
UNIT_SRCS := $(sort $(wildcard tests/unit/test_*.c))
INTEG_SRCS:= $(sort $(wildcard tests/integration/test_*.c))
E2E_SRCS  := $(sort $(wildcard tests/e2e/*.c))
FUZZ_SRCS := $(sort $(wildcard tests/fuzz/fuzz_*.c))
BENCH_SRCS:= $(sort $(wildcard tools/bench/*.c))

LIB_OBJS  := $(LIB_SRCS:%.c=$(OUT)/%.o)
D_OBJS    := $(D_SRCS:%.c=$(OUT)/%.o)
# The daemon without its main(): what the unit and integration tests link.
D_LIB_OBJS:= $(filter-out $(OUT)/user/egressd/main.o,$(D_OBJS))
CTL_OBJS  := $(CTL_SRCS:%.c=$(OUT)/%.o)
UNIT_BINS := $(UNIT_SRCS:tests/unit/%.c=$(OUT)/tests/%)
INTEG_BINS:= $(INTEG_SRCS:tests/integration/%.c=$(OUT)/tests/integration/%)
# netprobe (tests/e2e/netprobe/) is one program of several modules.
NETPROBE_SRCS := $(sort $(wildcard tests/e2e/netprobe/*.c))
E2E_BINS  := $(E2E_SRCS:tests/e2e/%.c=$(OUT)/tests/%) $(OUT)/tests/netprobe
FUZZ_BINS := $(FUZZ_SRCS:tests/fuzz/%.c=$(OUT)/fuzz/%)
BENCH_BINS:= $(BENCH_SRCS:tools/bench/%.c=$(OUT)/bench/%)
# Empty programs at egressd's hooks: the connect benchmark's floor (tools/bench_floor.py).
BENCH_BPF := $(OUT)/bench/floor.bpf.o $(OUT)/bench/floor-skcreate.bpf.o \
	     $(OUT)/bench/floor-sklookup.bpf.o $(OUT)/bench/floor-netdev.bpf.o

BPF_HDRS  := $(wildcard include/*.h) $(wildcard bpf/*.h bpf/lib/*.h)

ifeq ($(V),1)
Q :=
msg :=
else
Q := @
msg = @printf '  %-8s %s\n' "$(1)" "$(2)";
endif

.DELETE_ON_ERROR:
.SECONDARY:
.PHONY: all deps test test-kernels test-unit test-integration test-bpf test-e2e test-fuzz test-asan demo bench vmlinux clean fmt upgrade-from image install-oci-hooks

MAN_PAGES := $(OUT)/man/egressd.8 $(OUT)/man/egressctl.8
DOCS      := README.md $(sort $(wildcard docs/*.md))

# ASan cannot link statically: SAN=1 builds no egressctl-static.
STATIC_CTL := $(if $(filter 1,$(SAN)),,$(OUT)/egressctl-static)
all: $(OUT)/egressd $(OUT)/egressctl $(STATIC_CTL) $(MAN_PAGES) $(OUT)/egressd.service

deps:
	$(Q)tools/install-deps

# --- BPF ---------------------------------------------------------------------
# One object per concern: egressd.bpf.c (the cgroup programs, attached per
# sandbox), escape.bpf.c (the host-wide cgroup_attach_task guard) and
# escape_root.bpf.c (its cgroup programs at the cgroup2 root).
$(OUT)/%.bpf.o: bpf/%.bpf.c $(BPF_HDRS) vmlinux/vmlinux.h | $(OUT)
	$(call msg,BPF,$@)
	$(Q)$(CLANG) $(BPF_CFLAGS) -c $< -o $@.tmp
	$(Q)$(BPFTOOL) gen object $@ $@.tmp && rm -f $@.tmp

$(OUT)/%.skel.h: $(OUT)/%.bpf.o
	$(call msg,GEN-SKEL,$@)
	$(Q)$(BPFTOOL) gen skeleton $< name $(subst -,_,$*)_bpf > $@

# The BPF tests (tests/bpf): bpf/lib's decisions in a cgroup_skb program,
# run with BPF_PROG_TEST_RUN against the real map definitions (root).
BPFT_OUT := $(OUT)/tests/bpf

$(BPFT_OUT)/%.bpf.o: tests/bpf/%.bpf.c tests/bpf/egr_test.h $(BPF_HDRS) vmlinux/vmlinux.h
	$(call msg,BPF,$@)
	@mkdir -p $(@D)
	$(Q)$(CLANG) $(BPF_CFLAGS) -Ibpf -Itests/bpf -c $< -o $@.tmp
	$(Q)$(BPFTOOL) gen object $@ $@.tmp && rm -f $@.tmp

$(BPFT_OUT)/%.skel.h: $(BPFT_OUT)/%.bpf.o
	$(call msg,GEN-SKEL,$@)
	$(Q)$(BPFTOOL) gen skeleton $< name $(subst -,_,$*)_bpf > $@

$(BPFT_OUT)/test_bpf: tests/bpf/test_bpf.c tests/bpf/egr_test.h $(BPFT_OUT)/egr_test.skel.h \
		      $(wildcard include/*.h)
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) -I$(BPFT_OUT) -Itests/bpf $< $(LDFLAGS) -lbpf -lelf -lz -lcmocka -o $@

# The device sandbox programs, the real object (tests/bpf/test_netdev*.c,
# the red team's frames in tests/bpf/test_netdev_hostile.c).
$(BPFT_OUT)/test_netdev $(BPFT_OUT)/test_netdev_hostile $(BPFT_OUT)/test_netdev_inspect: \
		$(BPFT_OUT)/%: tests/bpf/%.c tests/bpf/netdev_fixture.h $(OUT)/netdev.skel.h \
		$(wildcard include/*.h)
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -Itests/bpf $< $(LDFLAGS) -lbpf -lelf -lz -lcmocka -o $@

# ns per call of single decisions (docs/benchmarks.md); not part of make test.
$(BPFT_OUT)/bench_ops: tests/bpf/bench_ops.c tests/bpf/egr_test.h $(BPFT_OUT)/egr_test.skel.h \
		       $(wildcard include/*.h)
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) -I$(BPFT_OUT) -Itests/bpf $< $(LDFLAGS) -lbpf -lelf -lz -o $@

# --- userspace ---------------------------------------------------------------
$(OUT)/%.o: %.c $(wildcard include/*.h) $(wildcard user/lib/*.h) $(wildcard user/*/*.h) $(wildcard user/*/*/*.h)
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -Iuser/$(word 2,$(subst /, ,$<)) -c $< -o $@

# Only the daemon includes the skeleton.
$(D_OBJS): $(OUT)/netdev.skel.h $(OUT)/egressd.skel.h $(OUT)/escape.skel.h $(OUT)/escape_root.skel.h

$(OUT)/libegr.a: $(LIB_OBJS)
	$(call msg,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

$(OUT)/libegressd.a: $(D_LIB_OBJS)
	$(call msg,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

$(OUT)/egressd: $(D_OBJS) $(OUT)/libegr.a
	$(call msg,LD,$@)
	$(Q)$(CC) $(LDFLAGS) $^ $(LIBS) -o $@

# egressctl: libcrypto is loaded only when a command uses it
# (user/egressctl/lazycrypto.c), not at every start; --as-needed keeps the
# other libraries off it unless it calls them.
CTL_LIBS := -Wl,--as-needed $(filter-out -lcrypto,$(LIBS))
$(OUT)/egressctl: $(CTL_OBJS) $(OUT)/libegr.a
	$(call msg,LD,$@)
	$(Q)$(CC) $(LDFLAGS) $^ $(CTL_LIBS) -o $@

# The same egressctl linked statically, for the OCI hook a DaemonSet copies
# onto nodes whose libraries it cannot know (dist/kubernetes/daemonset.yaml:
# no libjansson, libseccomp or glibc version needed on the host). Debian's
# -dev packages ship every .a it needs; libcrypto stays off it (lazycrypto:
# `audit verify` is not a hook's job and says so there). The link warnings
# about dlopen/getpwuid are about those paths only; the hook uses neither.
$(OUT)/egressctl-static: $(CTL_OBJS) $(OUT)/libegr.a
	$(call msg,LD,$@)
	$(Q)$(CC) $(LDFLAGS) -static $^ -lbpf -lelf -lz -ljansson -lseccomp -o $@ 2>$@.ldlog || \
		{ cat $@.ldlog >&2; exit 1; }

# lazycrypto.c's test links as egressctl does: no -lcrypto.
$(OUT)/tests/test_lazycrypto: tests/unit/test_lazycrypto.c $(OUT)/user/egressctl/lazycrypto.o \
			      $(OUT)/libegr.a $(TEST_HDRS)
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $< $(OUT)/user/egressctl/lazycrypto.o $(OUT)/libegr.a $(LDFLAGS) \
		$(CTL_LIBS) -lcmocka -o $@

# Unit tests (tests/unit: no root, no daemon, no dnsmasq) and integration
# tests (tests/integration: root, real BPF maps, a dnsmasq they start) link
# the daemon's objects and the library instead of including their sources.
TEST_HDRS := $(wildcard include/*.h user/lib/*.h user/lib/*/*.h user/egressd/*.h user/egressd/*/*.h \
			 tests/common/*.h)
$(OUT)/tests/test_%: tests/unit/test_%.c $(OUT)/libegressd.a $(OUT)/libegr.a $(TEST_HDRS)
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -Iuser/egressd $< $(OUT)/libegressd.a $(OUT)/libegr.a $(LDFLAGS) $(LIBS) -lcmocka -o $@

$(OUT)/tests/integration/test_%: tests/integration/test_%.c $(OUT)/libegressd.a $(OUT)/libegr.a $(TEST_HDRS) \
				  $(wildcard tests/integration/*.h)
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -Iuser/egressd $< $(OUT)/libegressd.a $(OUT)/libegr.a $(LDFLAGS) $(LIBS) -lcmocka -o $@

# The registry's set and state files are daemon objects; its test links them.
REGISTRY_TEST_OBJS := $(OUT)/user/egressd/registry/registry.o $(OUT)/user/egressd/registry/statefile.o
$(OUT)/tests/test_registry: tests/unit/test_registry.c $(REGISTRY_TEST_OBJS) $(OUT)/libegr.a \
			    $(wildcard user/egressd/*.h user/egressd/*/*.h)
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -Iuser/egressd $< $(REGISTRY_TEST_OBJS) $(OUT)/libegr.a $(LDFLAGS) $(LIBS) \
		-lcmocka -o $@

# test_kmaps (root) loads egressd's own map definitions (kernel/bpfstate.c).
$(OUT)/tests/integration/test_kmaps: | $(OUT)/egressd.skel.h

$(OUT)/tests/%: tests/e2e/%.c $(wildcard include/*.h)
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $< $(LDFLAGS) -o $@

$(OUT)/tests/netprobe: $(NETPROBE_SRCS) tests/e2e/netprobe/netprobe.h
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(NETPROBE_SRCS) $(LDFLAGS) -o $@

$(OUT)/bench/floor.bpf.o: FLOOR_SK := 0
$(OUT)/bench/floor-skcreate.bpf.o: FLOOR_SK := 1
$(OUT)/bench/floor-sklookup.bpf.o: FLOOR_SK := 2
$(OUT)/bench/floor-netdev.bpf.o: tools/bench/floor/netdev_empty.bpf.c vmlinux/vmlinux.h
	$(call msg,BPF,$@)
	@mkdir -p $(@D)
	$(Q)$(CLANG) $(BPF_CFLAGS) -c $< -o $@.tmp
	$(Q)$(BPFTOOL) gen object $@ $@.tmp && rm -f $@.tmp

$(filter-out $(OUT)/bench/floor-netdev.bpf.o,$(BENCH_BPF)): tools/bench/floor/empty.bpf.c vmlinux/vmlinux.h
	$(call msg,BPF,$@)
	@mkdir -p $(@D)
	$(Q)$(CLANG) $(BPF_CFLAGS) -DFLOOR_SK=$(FLOOR_SK) -c $< -o $@.tmp
	$(Q)$(BPFTOOL) gen object $@ $@.tmp && rm -f $@.tmp

$(OUT)/bench/%: tools/bench/%.c $(OUT)/libegr.a
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $< $(OUT)/libegr.a $(LDFLAGS) $(LIBS) -lpthread -o $@

# Fuzz targets: clang's libFuzzer with ASan and UBSan, the library sources
# compiled in directly so they are instrumented too.
FUZZ_CFLAGS := -std=gnu11 -g -O1 -Wall -Wextra -Werror -Wno-unused-parameter -D_GNU_SOURCE \
	       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	       -Iinclude -Iuser/lib -DEGRESSD_VERSION='"$(VERSION)"'
$(OUT)/fuzz/%: tests/fuzz/%.c $(LIB_SRCS) $(wildcard user/lib/*.h) $(wildcard include/*.h)
	$(call msg,FUZZ,$@)
	@mkdir -p $(@D)
	$(Q)$(CLANG) $(FUZZ_CFLAGS) $< $(LIB_SRCS) $(LIBS) -o $@

$(OUT):
	@mkdir -p $@

# --- man pages, the unit, install, package ---------------------------------------
.PHONY: install uninstall deb FORCE

$(OUT)/man/%.8: man/%.8.scd
	$(call msg,SCDOC,$@)
	@mkdir -p $(@D)
	$(Q)scdoc < $< > $@

# Regenerated every time: it names the install paths of this invocation.
$(OUT)/egressd.service: dist/egressd.service.in FORCE | $(OUT)
	$(Q)sed -e 's|@SBINDIR@|$(SBINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' \
		-e 's|@DOCDIR@|$(DOCDIR)|g' $< > $@.tmp && mv $@.tmp $@

FORCE:

# An existing configuration file is never overwritten.
install: all install-oci-hooks
	$(INSTALL) -d $(DESTDIR)$(SBINDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man8 \
		$(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(BASHCOMPDIR) \
		$(DESTDIR)$(DOCDIR) $(DESTDIR)$(SYSCONFDIR)/egressd
	$(INSTALL) -d -m 0755 $(DESTDIR)$(POLICYDIR)
	$(INSTALL) -m 0755 $(OUT)/egressd $(DESTDIR)$(SBINDIR)/egressd
	$(INSTALL) -m 0755 $(OUT)/egressctl $(DESTDIR)$(BINDIR)/egressctl
	$(INSTALL) -m 0644 $(MAN_PAGES) $(DESTDIR)$(MANDIR)/man8/
	$(INSTALL) -m 0644 $(OUT)/egressd.service $(DESTDIR)$(UNITDIR)/egressd.service
	$(INSTALL) -m 0644 dist/egressd.sysusers $(DESTDIR)$(SYSUSERSDIR)/egressd.conf
	$(INSTALL) -m 0644 dist/egressctl.bash-completion $(DESTDIR)$(BASHCOMPDIR)/egressctl
	$(INSTALL) -m 0644 $(DOCS) $(DESTDIR)$(DOCDIR)/
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/egressd/egressd.json ]; then \
		echo "install: keeping $(DESTDIR)$(SYSCONFDIR)/egressd/egressd.json"; \
	else \
		echo "$(INSTALL) -m 0644 dist/egressd.json $(DESTDIR)$(SYSCONFDIR)/egressd/egressd.json"; \
		$(INSTALL) -m 0644 dist/egressd.json $(DESTDIR)$(SYSCONFDIR)/egressd/egressd.json; \
	fi

# The configuration file stays (it may have been edited).
uninstall:
	rm -f $(DESTDIR)$(SBINDIR)/egressd $(DESTDIR)$(BINDIR)/egressctl \
		$(DESTDIR)$(MANDIR)/man8/egressd.8 $(DESTDIR)$(MANDIR)/man8/egressctl.8 \
		$(DESTDIR)$(UNITDIR)/egressd.service $(DESTDIR)$(SYSUSERSDIR)/egressd.conf \
		$(DESTDIR)$(BASHCOMPDIR)/egressctl
	rm -f $(addprefix $(DESTDIR)$(HOOKSDIR)/,$(notdir $(wildcard dist/oci/*.json)))
	rm -rf $(DESTDIR)$(DOCDIR)

# tools/install-deps --deb installs what this needs (dpkg-dev, fakeroot).
deb: all
	$(Q)tools/mkdeb $(OUT) $(VERSION)

# --- tests -------------------------------------------------------------------
# The whole suite, then the unit and end-to-end tests again against an
# ASan/UBSan build of egressd, egressctl and the tests (issue 5).
test: deps
	$(Q)tools/install-deps --deb # the package tests build and lint a .deb
	$(Q)$(MAKE) --no-print-directory all $(UNIT_BINS) $(INTEG_BINS) $(BPFT_OUT)/test_bpf $(E2E_BINS) $(FUZZ_BINS)
	$(Q)tools/module-cycles --build $(OUT)
	$(Q)$(MAKE) --no-print-directory test-unit test-integration test-bpf test-fuzz
	$(Q)$(MAKE) --no-print-directory test-e2e E2E_SELECT="$(E2E_RELEASE_SELECT)"
	$(Q)$(MAKE) --no-print-directory test-asan

test-unit: $(UNIT_BINS)
	$(Q)tools/run-unit $(UNIT_BINS)

# Root: BPF maps, dnsmasq.
test-integration: $(INTEG_BINS)
	$(Q)tools/run-unit $(INTEG_BINS)

# Root: it loads BPF. Never skips (a host that cannot load it fails).
test-bpf: $(BPFT_OUT)/test_bpf $(BPFT_OUT)/test_netdev $(BPFT_OUT)/test_netdev_hostile \
		$(BPFT_OUT)/test_netdev_inspect
	$(Q)tools/run-unit $(BPFT_OUT)/test_bpf $(BPFT_OUT)/test_netdev \
		$(BPFT_OUT)/test_netdev_hostile $(BPFT_OUT)/test_netdev_inspect

test-fuzz: $(FUZZ_BINS)
	$(Q)tools/run-fuzz $(OUT) $(FUZZ_BINS)

# The tests that need systemd as PID 1, lsm programs or runsc are left out
# here (the run lists them); make test-kernels runs them in its guests
# (runsc cannot start its sandbox in a chroot, as a fresh CI machine is:
# the kernel refuses a new user namespace to a chrooted process).
# E2E_SELECT narrows the run (run.py -m, --kernel-subset, --needing).
# make test runs each e2e test against the ASan/UBSan build (test-asan),
# except those that check a shipped artifact (plain_build); against the
# release build it runs those and the kernel-dependent subset, the one
# make test-kernels runs in its guests (docs/testing.md, "What make test
# runs"). make test-e2e alone runs the whole e2e on the release build.
E2E_WITHOUT ?= systemd,lsm_cgroup,runsc
E2E_SELECT  ?=
E2E_RELEASE_SELECT := --kernel-subset --needing plain_build
test-e2e: all $(E2E_BINS) upgrade-from
	$(Q)python3 tests/e2e/run.py --build $(OUT) $(E2E_SELECT) \
		$(if $(E2E_WITHOUT),--without $(E2E_WITHOUT))

# Root. KERNELS: debian-6.1, debian-6.12, a linux-image .deb or a bzImage
# path (tools/test-kernels); the guests' results and serial logs go to
# $(OUT)/kernels/, the table into docs/testing.md and README.md.
test-kernels:
	$(Q)tools/install-deps --kernels
	$(Q)$(MAKE) --no-print-directory all $(BPFT_OUT)/test_bpf $(E2E_BINS) upgrade-from
	$(Q)$(MAKE) --no-print-directory deb
	$(Q)tools/test-kernels --build $(OUT)

# The earlier egressd builds the upgrade test replaces (tests/upgrade-from),
# cached under $(OUT)/upgrade-from/.
upgrade-from:
	$(Q)tools/build-previous $(OUT)

comma := ,
# The tests of artifacts built from the plain tree (the .deb, the image:
# need plain_build) ran in make test's pass; this one leaves them out.
test-asan: deps
	$(Q)$(MAKE) --no-print-directory SAN=1 all $(UNIT_BINS) $(INTEG_BINS) $(E2E_BINS)
	$(Q)$(MAKE) --no-print-directory SAN=1 test-unit test-integration test-e2e \
		E2E_WITHOUT=$(if $(E2E_WITHOUT),$(E2E_WITHOUT)$(comma))plain_build

demo: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)tools/demo $(OUT)

bench:
	$(Q)tools/install-deps --bench
	$(Q)$(MAKE) --no-print-directory all $(E2E_BINS) $(BENCH_BINS) $(BENCH_BPF)
	$(Q)python3 tools/bench.py --build $(OUT)

# The image. IMAGE_BUILD_ARGS takes e.g. --build-arg BASE=... --build-arg
# RUNTIME_BASE=...; the RUN steps fetch Debian packages, hence host networking.
# PODMAN="podman --runtime runc" on a hybrid cgroup host (crun refuses it).
# IMAGE_PREBUILT=1 puts `make all`'s binaries in the image instead of
# compiling them in its build stage (Containerfile, PREBUILT): the host must
# be Debian 12 like the image. The staging directory is in the build context
# (.containerignore lets it through).
IMAGE            ?= localhost/egressd:$(VERSION)
IMAGE_BUILD_ARGS ?=
IMAGE_PREBUILT   ?=
PODMAN           ?= podman
IMAGE_STAGE      := .image-prebuilt
image: $(if $(IMAGE_PREBUILT),all)
ifneq ($(IMAGE_PREBUILT),)
	rm -rf $(IMAGE_STAGE) && mkdir -p $(IMAGE_STAGE)
	cp $(OUT)/egressd $(OUT)/egressctl $(OUT)/egressctl-static $(IMAGE_STAGE)/
endif
	$(PODMAN) build --network host $(IMAGE_BUILD_ARGS) \
		$(if $(IMAGE_PREBUILT),--build-arg PREBUILT=$(IMAGE_STAGE)) -t $(IMAGE) -f Containerfile .

# The OCI hooks.d files (docs/containers.md), pointed at BINDIR's egressctl
# and POLICYDIR; part of `make install`. HOOKSDIR is under DATADIR like
# everything else: for PREFIX=/usr it is /usr/share/containers/oci/hooks.d,
# where Podman and CRI-O look; another PREFIX's needs HOOKSDIR=
# /etc/containers/oci/hooks.d or the runtime's hooks_dir setting.
HOOKSDIR  ?= $(DATADIR)/containers/oci/hooks.d
POLICYDIR ?= $(SYSCONFDIR)/egressd/policies
install-oci-hooks:
	install -d $(DESTDIR)$(HOOKSDIR)
	for f in dist/oci/*.json; do \
		sed -e 's|"/usr/local/bin/egressctl"|"$(BINDIR)/egressctl"|' \
		    -e 's|"/etc/egressd/policies"|"$(POLICYDIR)"|' $$f > $(DESTDIR)$(HOOKSDIR)/$$(basename $$f).tmp && \
		chmod 0644 $(DESTDIR)$(HOOKSDIR)/$$(basename $$f).tmp && \
		mv $(DESTDIR)$(HOOKSDIR)/$$(basename $$f).tmp $(DESTDIR)$(HOOKSDIR)/$$(basename $$f) || exit 1; \
	done

vmlinux:
	$(BPFTOOL) btf dump file /sys/kernel/btf/vmlinux format c > vmlinux/vmlinux.h

fmt:
	clang-format -i bpf/*.c bpf/lib/*.h include/*.h user/*/*.c user/*/*.h tests/*/*.c

clean:
	rm -rf build build-asan
