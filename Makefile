# hcomm — build, test, benchmark, demo.
#
#   make demo   run the main job (see README)
#   make test   vet + race tests over every package, privileged tests included
#               (they skip with a reason unless root; HCOMM_REQUIRE_PRIVILEGED=1
#               turns those skips into failures, as CI does), then test-vm:
#               the privileged tests again inside a QEMU guest (tests/vm/);
#               capi-test: the C ABI's C tests (libhcomm.so, valgrind, install);
#               python-test: the Python package's tests (python/, pytest)
#   make install    libhcomm.so.0, hcomm.h and hcomm.pc under PREFIX (/usr/local);
#                   make uninstall removes them (DESTDIR is honoured)
#
# Targets that need Debian packages name their group of scripts/deps.sh (the one
# list): as root it installs what is missing; as any other user a missing
# package stops the run at once with the apt-get install line to run as root
# (optional ones: a skip with the reason).

GO        ?= go
# The library (go.mod) and the tools (cmd/go.mod: their own module, so that
# the library's users do not inherit gonum or Prometheus), one workspace
# (go.work) for development.
PKGS      ?= ./... ./cmd/...
BIN       := bin
STATICCHECK_VERSION := v0.8.2

.PHONY: fuzz fuzz-python lint-arm64 check-lib-deps soak test-soak install uninstall python-test capi-install-test all build test lint-vet test-unit test-engine test-vm test-vm-arm64 test-vm-rdma test-vm-rdma-short bench-vm bench-vm-rdma test-long bench bench-uring-nop bench-insn bench-hcomm bench-report demo lint generate clean capi capi-valgrind capi-cgocheck2 capi-test bench-capi bpf-tools bpf-vmlinux check-generate godefs-tools

all: build

# make deps-GROUP: scripts/deps.sh GROUP (build generate vm python pybench test bench demo).
DEPS := scripts/deps.sh
deps-%:
	@$(DEPS) $*

build: deps-build
	$(GO) build $(PKGS)
	mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/...

# The README's test command. Everything CI runs hangs off this target
# (.ci/run is this with HCOMM_REQUIRE_PRIVILEGED=1).
test: deps-test check-generate check-lib-deps lint-vet lint-arm64 test-unit test-engine test-soak capi-test python-test test-vm test-vm-arm64

# A throwaway module that imports engine and backend/uringfile lists neither
# gonum nor Prometheus in its module graph (scripts/check-lib-deps.sh).
check-lib-deps:
	GO=$(GO) scripts/check-lib-deps.sh

lint-vet: deps-build
	$(GO) vet $(PKGS)
	$(GO) vet -tags $(FUZZ_TAGS) ./capi

# linux/arm64: every package builds and vets, cgo off. The cgo packages (capi,
# backend/ucx, and cmd/hcomm-bench through it) need libucx for arm64, which
# Debian offers only through multiarch (dpkg --add-architecture arm64): they
# are built on arm64 hosts natively, not cross-built here.
ARM64_NOCGO = /(capi|backend/ucx|cmd/hcomm-bench)$$
ARM64_LIST = GOARCH=arm64 CGO_ENABLED=0 $(GO) list $(1) $(PKGS) | grep -vE '$(ARM64_NOCGO)'
lint-arm64: deps-build
	GOARCH=arm64 CGO_ENABLED=0 $(GO) build $$($(call ARM64_LIST,-f '{{if .GoFiles}}{{.ImportPath}}{{end}}'))
	GOARCH=arm64 CGO_ENABLED=0 $(GO) vet $$($(call ARM64_LIST,))

test-unit: deps-build
	$(GO) test -race -count=1 -timeout 20m $(PKGS)
	$(GO) test -race -count=1 -timeout 5m -tags $(FUZZ_TAGS) -run 'ABI' ./capi

# engine/: the exactly-once stress at full size (10^6 transfers; -race runs
# 10^5) and the 1000-cycle leak test, without -race; the debug build's
# Block.Bytes panic (-tags hcommdebug).
test-engine:
	$(GO) test -count=1 -timeout 10m -run 'ExactlyOnce|NoLeaks' ./engine/
	$(GO) test -count=1 -tags hcommdebug -run 'BytesAfterClose' ./engine/

# The soak (tests/soak, docs/soak.md): several engines on every backend —
# HDMA on vfio-mock with seeded error/latency/stall/reset injection, the
# io_uring file backend (buffered and O_DIRECT), memory — under random
# sizes, batches, expiring contexts and Close/reopen, for SOAK (default
# 10m); exactly-once callbacks, CRC-checked bytes, every failure accounted
# for, no leak, the RSS slope. A failing run prints its seed: make soak
# SEED=n replays the schedule. make test runs it for 60 s (test-soak).
SOAK ?= 10m
SEED ?= 0
soak:
	$(GO) test -count=1 -timeout 0 -run '^TestSoak$$' -v ./tests/soak/ -soak $(SOAK) -seed $(SEED)

test-soak:
	$(GO) test -count=1 -timeout 0 -run '^TestSoak$$' -v ./tests/soak/ -soak 60s -seed $(SEED)

# Every Go fuzz target (func Fuzz* in a _test.go of PKGS: parsers, the ring
# and allocator models, the UCX handshake's FuzzHello, the C ABI's FuzzABI —
# capi/abifuzz_test.go, which calls every hcomm_* function through its C
# wrapper with live, stale, forged and foreign handles, pointers, sizes and
# flags; built with -tags hcommfuzz only), each for FUZZTIME, then the Python
# package's (fuzz-python). Inputs that fail are written to the package's
# testdata/fuzz/<target>/, where every later go test runs them. A run goes
# through all targets and fails at the end, naming the ones that failed.
FUZZTIME ?= 10s
FUZZ_TAGS := hcommfuzz
fuzz: deps-build
	@failed=; for dir in $$($(GO) list -f '{{.Dir}}' $(PKGS)); do \
		for f in $$(cat $$dir/*_test.go 2>/dev/null | sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p'); do \
			echo "fuzz: $$f in $$dir for $(FUZZTIME)"; \
			(cd $$dir && $(GO) test -tags $(FUZZ_TAGS) -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 5s .) || failed="$$failed $$f"; \
		done; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: FAILED:$$failed"; exit 1; fi
	$(MAKE) fuzz-python

# The Python package's argument checks fuzzed (PY_FUZZ, run by
# python/tests/run.sh fuzz against bin/capi/libhcomm.so for FUZZTIME).
PY_FUZZ ?= python/tests/fuzz_args.py
fuzz-python: deps-python capi
	@if [ -f $(PY_FUZZ) ]; then \
		PYTHON=$(PYTHON) HCOMM_LIBRARY=$(abspath $(CAPI))/libhcomm.so FUZZTIME=$(FUZZTIME) python/tests/run.sh fuzz; \
	else echo "fuzz-python: SKIPPED: no $(PY_FUZZ) in this tree"; fi

# C ABI (capi/, docs/capi.md): libhcomm.so and hcomm.h in bin/capi/, plus
# two builds of the same library for the C tests: -tags valgrind (the Go
# runtime describes its heap and stacks to memcheck; nodwarf5 because
# valgrind 3.19 cannot read DWARF 5) and GOEXPERIMENT=cgocheck2 (faults any
# Go pointer stored into C memory). capi-test compiles the C tests with
# cc -Wall -Werror and runs them (< 30 s), the seed example under valgrind
# included; bench-capi prints ns/submit from C and from Go side by side.
#
# The library is libhcomm.so.MAJOR.MINOR.PATCH with the soname libhcomm.so.MAJOR
# (symlinks libhcomm.so.MAJOR and libhcomm.so beside it) and exports only the
# hcomm_* functions (capi/hcomm.map, a linker version script). The version is
# hcomm.h's, which capi checks against hcomm.Version at compile time.
CAPI := $(BIN)/capi
HCOMM_VERSION := $(shell sed -n 's/^\#define HCOMM_VERSION_STRING "\(.*\)"/\1/p' capi/hcomm.h)
HCOMM_SOMAJOR := $(firstword $(subst ., ,$(HCOMM_VERSION)))
CAPI_LDFLAGS := -ldflags='-extldflags "-Wl,-soname,libhcomm.so.$(HCOMM_SOMAJOR) -Wl,--version-script=$(CURDIR)/capi/hcomm.map"'
# capi_lib DIR ENV TAGS: build the library into DIR with its symlinks.
define capi_lib
	mkdir -p $(1)
	$(2) $(GO) build $(3) -buildmode=c-shared $(CAPI_LDFLAGS) -o $(1)/libhcomm.so.$(HCOMM_VERSION) ./capi
	rm -f $(1)/libhcomm*.h
	ln -sf libhcomm.so.$(HCOMM_VERSION) $(1)/libhcomm.so.$(HCOMM_SOMAJOR)
	ln -sf libhcomm.so.$(HCOMM_SOMAJOR) $(1)/libhcomm.so
endef

capi: deps-build
	$(call capi_lib,$(CAPI),,)
	cp capi/hcomm.h $(CAPI)/hcomm.h

capi-valgrind:
	$(call capi_lib,$(CAPI)/valgrind,GOEXPERIMENT=nodwarf5,-tags valgrind)

capi-cgocheck2:
	$(call capi_lib,$(CAPI)/cgocheck2,GOEXPERIMENT=cgocheck2,)

capi-test: capi capi-valgrind capi-cgocheck2 capi-install-test
	tests/capi/run.sh $(CAPI)

# make install into a temporary prefix, a pkg-config build of the seed
# example against it, the exported symbols (nm -D: hcomm_* only), then
# make uninstall (tests/capi/install.sh).
capi-install-test: capi
	tests/capi/install.sh $(CAPI)

PREFIX     ?= /usr/local
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PCDIR      ?= $(LIBDIR)/pkgconfig

install: capi
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PCDIR)
	install -m 0755 $(CAPI)/libhcomm.so.$(HCOMM_VERSION) $(DESTDIR)$(LIBDIR)/
	ln -sf libhcomm.so.$(HCOMM_VERSION) $(DESTDIR)$(LIBDIR)/libhcomm.so.$(HCOMM_SOMAJOR)
	ln -sf libhcomm.so.$(HCOMM_SOMAJOR) $(DESTDIR)$(LIBDIR)/libhcomm.so
	install -m 0644 capi/hcomm.h $(DESTDIR)$(INCLUDEDIR)/hcomm.h
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|; s|@INCLUDEDIR@|$(INCLUDEDIR)|; s|@VERSION@|$(HCOMM_VERSION)|' \
		capi/hcomm.pc.in > $(DESTDIR)$(PCDIR)/hcomm.pc
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then ldconfig; fi

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/libhcomm.so.$(HCOMM_VERSION) $(DESTDIR)$(LIBDIR)/libhcomm.so.$(HCOMM_SOMAJOR) \
		$(DESTDIR)$(LIBDIR)/libhcomm.so $(DESTDIR)$(INCLUDEDIR)/hcomm.h $(DESTDIR)$(PCDIR)/hcomm.pc

# Python package (python/, docs/python.md): installed with pip (offline, its
# own build backend) into a venv of PYTHON (the python3 on PATH unless told
# otherwise), then python/tests run with pytest against the installed
# package and bin/capi/libhcomm.so (python/tests/run.sh; tests that need
# numpy or torch skip with the reason without them).
PYTHON ?=

python-test: deps-python capi
	PYTHON=$(PYTHON) HCOMM_LIBRARY=$(abspath $(CAPI))/libhcomm.so python/tests/run.sh

# hcomm.data's loader vs torch's DataLoader (num_workers 0 and 2) on 1 GiB of
# 128 KiB records, side by side (python/bench/loader_bench.py, docs/python.md;
# BENCH_ARGS="--gib 2 --reps 5").
python-bench: deps-pybench capi
	PYTHON=$(PYTHON) HCOMM_LIBRARY=$(abspath $(CAPI))/libhcomm.so python/tests/run.sh bench

bench-capi: capi
	mkdir -p $(CAPI)/tests
	cc -Wall -Werror -O2 -I $(CAPI) -o $(CAPI)/tests/bench_submit tests/capi/bench_submit.c -L $(CAPI) -lhcomm -Wl,-rpath,$(abspath $(CAPI))
	$(GO) test -run '^$$' -bench Submit -benchtime $${BENCHTIME:-2000x} -count $${COUNT:-5} ./capi

# Packages with privileged tests, run again inside a QEMU guest that has what
# the host lacks (VFIO + vIOMMU + QEMU's edu device, hugetlb, io_uring, BPF):
# one VM per test binary, see tests/vm/ and docs/vm-tests.md. Add your
# package here when it has tests that need privileges. Needs no root once
# qemu-system-x86, busybox-static, cpio, xz-utils and e2fsprogs are installed (installed here when
# root); without them it skips, or fails under HCOMM_REQUIRE_PRIVILEGED=1.
VM_PKGS ?= ./hugepage/... ./ring/... ./engine ./trace ./cmd/hcomm-trace ./vfio ./vfio/edu ./vfio/hdma ./vfio/nvme ./backend/nvme ./tests/soak

# tests/soak is here for its device-mapper error test, which needs dm-mod (this
# host's kernel lacks it); its other tests skip in the guest and run on the host.
# `make test-vm ARCH=arm64`: the same in an AArch64 guest (qemu-system-aarch64,
# Debian's qemu-system-arm, TCG), with the packages of VM_PKGS that pass
# there (VM_PKGS_ARM64, the longest first: two guests run at a time); engine
# runs -short there and trace without its cgo helper's test
# (tests/vm/args-arm64). test-vm-arm64 runs that when qemu-system-aarch64 is
# installed and says so otherwise.
VM_PKGS_ARM64 ?= ./engine ./trace ./cmd/hcomm-trace ./ring/... ./hugepage/... ./vfio ./vfio/edu ./vfio/hdma ./vfio/nvme ./backend/nvme
ARCH ?= amd64
VM_ARCH = $(if $(filter arm64,$(ARCH)),arm64,amd64)

# On x86, test-vm then boots the soft-RoCE guest too (test-vm-rdma-short:
# backend/ucx over rc_verbs on rxe0); VM_RDMA=0 leaves it out.
VM_RDMA ?= 1

test-vm: deps-vm
	$(if $(filter arm64,$(VM_ARCH)),HCOMM_STRESS_ITEMS=10000000) HCOMM_VM_ARCH=$(VM_ARCH) tests/vm/run.sh $(if $(filter arm64,$(VM_ARCH)),$(VM_PKGS_ARM64),$(VM_PKGS))
	$(if $(and $(filter amd64,$(VM_ARCH)),$(filter 1,$(VM_RDMA))),$(MAKE) test-vm-rdma-short)

# backend/ucx over RDMA verbs on soft-RoCE in the x86 guest (rxe0 on a
# virtio-net device that reaches no network): a cgo test binary with its
# shared libraries; TestTransport fails when UCX chose anything but rc/ud.
# Run with -v, so that the log names the transport and device of each lane
# UCX chose (TestTransport) even when every test passes.
VM_RDMA_ENV = HCOMM_VM_RDMA=1 HCOMM_VM_TIMEOUT=900 HCOMM_VM_GOTIMEOUT=14m HCOMM_VM_CGO=1 HCOMM_UCX_TLS=rc_verbs,ud_verbs HCOMM_UCX_IP=10.0.2.15 UCX_NET_DEVICES=rxe0:1,lo UCX_IB_GID_INDEX=0

test-vm-rdma: deps-vm
	$(VM_RDMA_ENV) HCOMM_VM_GOFLAGS=-v tests/vm/run.sh ./backend/ucx

# The same with -short (10^4 transfers instead of 10^5 in the exactly-once
# and notification tests: 2 minutes instead of 7 under TCG), part of make test.
test-vm-rdma-short: deps-vm
	$(VM_RDMA_ENV) HCOMM_VM_GOFLAGS='-short -v' tests/vm/run.sh ./backend/ucx

# hcomm-bench's remote scenario over the same rxe device in that guest: the
# engine, ucx_perftest (ucp_put_bw, ucp_get, ucp_put_lat) and a TCP socket
# side by side, UCX_TLS=rc_verbs,ud_verbs for both, the same sizes and
# counts (cmd/hcomm-bench/remote.go, HCOMM_BENCH_RDMA_IP). Ratios only: the
# guest is TCG. Not part of make test; about 7 minutes. The output is also
# kept in bin/bench-vm-rdma.txt (docs/remote.md, BENCHMARKS.md).
bench-vm-rdma: deps-vm
	mkdir -p bin
	CGO_ENABLED=1 $(GO) build -o bin/hcomm-bench-vm ./cmd/hcomm-bench
	$(VM_RDMA_ENV) HCOMM_VM_TIMEOUT=720 HCOMM_BENCH_RDMA_IP=10.0.2.15 bash -o pipefail -c \
		'tests/vm/exec.sh bin/hcomm-bench-vm -scenarios remote -timeout 10m 2>&1 | tee bin/bench-vm-rdma.txt'

test-vm-arm64: deps-vm
	@if command -v qemu-system-aarch64 >/dev/null; then $(MAKE) test-vm ARCH=arm64; \
	else echo "test-vm-arm64: SKIPPED: no qemu-system-aarch64 (apt-get install qemu-system-arm)"; fi

# The measured VM table (docs/nvme.md): 4 KiB random I/O at queue depth 32
# on QEMU's NVMe controller, the engine on backend/nvme and the userspace
# driver (vfio/nvme) against the guest kernel's nvme driver through
# io_uring and pread/pwrite. Not part of make test. HCOMM_BENCH_VM_SECONDS sets the seconds per row (default 3).
bench-vm:
	HCOMM_BENCH_VM=1 HCOMM_VM_GOFLAGS='-v -run ^TestVMBench$$' tests/vm/run.sh ./backend/nvme

# Long modes, without -race: HCOMM_LONG=1 makes stress tests move their long
# counts (ring/: >= 10^8 items per descriptor-ring stress test).
test-long:
	HCOMM_LONG=1 $(GO) test -count=1 -timeout 60m -v -run 'Stress' ./ring/...

bench: deps-bench bench-uring-nop bench-insn bench-hcomm python-bench
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

# The engine's own cost in instructions per transfer against the HDMA driver
# alone on the same inline device model (backend/hdmadev
# BenchmarkEngineVsDriverSide, 4 KiB, batches of 1 and 64), counted by
# callgrind: the same figures on every run of one build, whatever else the
# machine does (scripts/insn-per-op.sh, docs/engine.md "Instructions per
# transfer").
bench-insn: deps-bench
	@if ! command -v valgrind >/dev/null; then echo "bench-insn: SKIPPED: no valgrind (apt-get install valgrind)"; exit 0; fi; \
	$(GO) test -c -o bin/hdmadev-insn.test ./backend/hdmadev && \
	scripts/insn-per-op.sh bin/hdmadev-insn.test 'EngineVsDriverSide/engine/batch=1/' 'EngineVsDriverSide/driver/batch=1/' \
		'EngineVsDriverSide/engine/batch=64/' 'EngineVsDriverSide/driver/batch=64/' | awk -F'\t' '{v[NR]=$$2; print} \
		END {printf "engine ÷ driver, instructions per 4 KiB transfer: batch 1 %.2f×, batch 64 %.2f×\n", v[1]/v[2], v[3]/v[4]}'

# io_uring NOPs: Go (internal/uring BenchmarkNop) vs C liburing (internal/uring/testdata/uring_nop.c,
# liburing-dev installed when missing), interleaved rounds, medians and Go/C ratios.
bench-uring-nop: deps-bench
	GO=$(GO) RUNS=$${RUNS:-5} internal/uring/testdata/bench_uring_nop.sh

# Side-by-side scenarios, engine vs traditional path vs peers (cmd/hcomm-bench,
# BENCHMARKS.md, docs/benchmarks.md): the tables, then every goal (cmd/hcomm-bench/goals.go)
# as met/missed with its measured ratio. Each scenario runs as a child process with a share of
# -timeout (default 20 minutes; BENCH_FLAGS=-quick: 8, usually about five); one that runs
# out of its share is stopped and its rows marked, the run goes on. fio and ucx_perftest
# (ucx-utils) are installed when missing (as root); without them their rows say why.
bench-hcomm: deps-bench
	$(GO) run ./cmd/hcomm-bench $(BENCH_FLAGS)

# The runs BENCHMARKS.md carries: RUNS (default 3) runs of hcomm-bench in a row, one binary
# built once, each printing its tables and goals and writing docs/bench/run-N.json; the last
# one's charts in docs/bench/ (*.svg, *.png) and its JSON also as docs/bench/run.json; then
# every goal over the runs (hcomm-bench -runs: each run's value, the range, how many runs met
# it) on stdout and in docs/bench/runs.md. A goal is reproducible when it is met in every run.
# LOCK=FILE holds flock(1) on FILE for each run, not across them. Each run stays within its
# -timeout (20 minutes; BENCH_FLAGS=-quick: 8, and such a run took 138-152 s on the 2-vCPU VM);
# the target fails if a run did (a scenario not finished, a failure), not for a missed goal.
# Run it on a quiet machine (load < 0.5).
RUNS ?= 3
bench-report: deps-bench
	mkdir -p $(BIN) docs/bench
	$(GO) build -o $(BIN)/hcomm-bench ./cmd/hcomm-bench
	@status=0; files=; for i in $$(seq 1 $(RUNS)); do \
		plot=; if [ $$i = $(RUNS) ]; then plot='-plot docs/bench'; fi; \
		echo "bench-report: run $$i of $(RUNS), $$(date -u +%FT%TZ), load $$(cut -d' ' -f1-3 /proc/loadavg)"; \
		$(if $(LOCK),flock $(LOCK)) $(BIN)/hcomm-bench $$plot -json-out docs/bench/run-$$i.json $(BENCH_FLAGS) || status=1; \
		files=$$files$${files:+,}docs/bench/run-$$i.json; \
	done; \
	cp docs/bench/run-$(RUNS).json docs/bench/run.json && \
	$(BIN)/hcomm-bench -runs $$files > docs/bench/runs.md && cat docs/bench/runs.md && exit $$status

demo: deps-demo
	$(GO) run ./cmd/hcomm-demo

lint: lint-vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)

generate: bpf-tools godefs-tools
	$(GO) generate $(PKGS)

# Kernel ABI files (internal/uring/zuring_*, vfio/zvfio_*, one per architecture:
# amd64, arm64): internal/cmd/godefs runs `go tool cgo -godefs` over each
# package's types_linux.go, which needs a C compiler for each architecture (the
# aarch64 cross compiler on an x86-64 host) and the kernel UAPI headers
# (scripts/deps.sh generate).
GODEFS_PKGS := internal/uring vfio

godefs-tools: deps-generate

# eBPF toolchain (bpf/, trace/): clang-14 compiles, llvm-14 strips, libbpf-dev
# has bpf_helpers.h, bpftool dumps vmlinux.h, linux-libc-dev has the syscall
# numbers (scripts/deps.sh generate).
bpf-tools: deps-generate

# Regenerate bpf/vmlinux.h from this machine's kernel BTF. Deliberately not
# part of generate: the objects must rebuild identically from the committed
# header on any machine (check-generate).
bpf-vmlinux: bpf-tools
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > bpf/vmlinux.h

# CI: the committed eBPF objects, generated tables and kernel ABI files
# (godefs) are byte for byte what their sources produce (see bpf/check-generate.sh).
check-generate: bpf-tools godefs-tools
	GO=$(GO) bpf/check-generate.sh
	GO=$(GO) $(GO) run ./internal/cmd/godefs -check $(GODEFS_PKGS)

clean:
	rm -rf $(BIN)
