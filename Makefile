# trainsim — one Makefile for the simulator (sim/), the reference executor (exec/),
# the CUDA kernels (kernels/) and every test.
#
#   make              build what this machine can build; print what was found
#   make test         run every test (unit, CLI goldens, MPI, GPU where present)
#   make test-sanitize  the same tests built with AddressSanitizer + UBSan
#   make bench        benchmarks (figures, never assertions)
#   make plots        regenerate experiments/ outputs and plots
#   make lint         cppcheck + clang-tidy (.clang-tidy) on every .c file, each
#                     with its build's flags; the include layers
#                     (tests/lint/layers.sh); the format (.clang-format).
#                     Fails on any finding (-j2 works; make -k lint lists the
#                     findings of every file)
#   make format       reformat every C, CUDA and header file (.clang-format)
#   make fuzz         build the libFuzzer harnesses (tests/fuzz/) with clang into
#                     build-fuzz/ and run each FUZZ_SECONDS (60) on a copy of its
#                     corpus (FUZZ_UPDATE=1 grows tests/fuzz/corpus/ instead);
#                     prints runs, cov/ft and crashes per harness, fails on a
#                     crash with the reproducer's path (docs/fuzzing.md)
#   make fuzz-ci      the short campaign CI runs: 30 s per harness
#                     (libFuzzer's seed FUZZ_SEED, default 1, printed;
#                     FUZZ_RUNS=N replays exactly N inputs: docs/fuzzing.md)
#   make help         this list
#   make clean        remove build/, build-san/ and build-fuzz/
#
# Required: a C11 compiler, GSL, libcsv, Criterion, OpenBLAS (./install.sh).
# Detected, never required: MPI (mpicc) for trainexec and the MPI tests;
# CUDA (nvcc, cuBLAS, NCCL) for the executor's GPU backend.

BUILD  ?= build
CC     ?= cc
OPT    ?= -O2 -g
SAN    ?=
WARN   := -Wall -Wextra -Werror -Wshadow -Wpointer-arith -Wstrict-prototypes \
          -Wmissing-prototypes -Wformat=2 -Wundef -Wcast-align -Wvla
CSTD   := -std=c11 -D_POSIX_C_SOURCE=200809L
# Every #include names its header from the repository root ("sim/core/engine.h"),
# so the folder a module lives in is visible where it is used.
CPPFLAGS += -I.
CFLAGS += $(CSTD) $(WARN) $(OPT) $(SAN) -MMD -MP
LDFLAGS += $(SAN)
LIBS_SIM  := -lgsl -lopenblas -lcsv -lm -lpthread
LIBS_TEST := -lcriterion

# ---------------------------------------------------------------- detection
probe = $(shell printf '$(1)\nint main(void){return 0;}\n' | $(2) -x c - -o /dev/null $(3) >/dev/null 2>&1 && echo 1)
HAVE_GSL       := $(call probe,\043include <gsl/gsl_interp.h>,$(CC),-lgsl -lopenblas)
HAVE_CSV       := $(call probe,\043include <csv.h>,$(CC),-lcsv)
HAVE_CRITERION := $(call probe,\043include <criterion/criterion.h>,$(CC),-lcriterion)
HAVE_OPENBLAS  := $(call probe,\043include <cblas.h>,$(CC),-lopenblas)
MPICC  ?= $(shell command -v mpicc 2>/dev/null)
MPIRUN ?= $(shell command -v mpirun 2>/dev/null)
HAVE_MPI := $(if $(and $(MPICC),$(MPIRUN)),$(call probe,\043include <mpi.h>,$(MPICC),))
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(shell command -v nvcc 2>/dev/null || { test -x $(CUDA_HOME)/bin/nvcc && echo $(CUDA_HOME)/bin/nvcc; })
HAVE_CUDA := $(if $(NVCC),$(call probe,\043include <cublasLt.h>\n\043include <nccl.h>,$(CC),-I$(CUDA_HOME)/include -L$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lnccl -lcudart))
ifeq ($(SAN),)
else
HAVE_CUDA :=
endif
ifeq ($(HAVE_MPI),)
HAVE_CUDA :=
endif

# Goals that need no library: they run on a machine where nothing is installed.
NO_LIB_GOALS := clean help format
REQUIRED_MISSING := $(if $(HAVE_GSL),,GSL) $(if $(HAVE_CSV),,libcsv) $(if $(HAVE_OPENBLAS),,OpenBLAS)
ifneq ($(strip $(REQUIRED_MISSING)),)
ifneq ($(filter-out $(NO_LIB_GOALS),$(or $(MAKECMDGOALS),all)),)
$(error missing required libraries: $(strip $(REQUIRED_MISSING)); run ./install.sh (Debian 12: libgsl-dev libcsv-dev libopenblas-dev))
endif
endif

# ---------------------------------------------------------------- sources
# Library: sim/<package>/*.c, every package but the commands; packages, lowest
# first (each uses only those before it): util sched config model core net infer search.
# Commands: sim/cli/*.c -> trainsim.
SIM_PKGS  := util sched config model core net infer search
SIM_SRC   := $(sort $(foreach p,$(SIM_PKGS),$(wildcard sim/$(p)/*.c)))
CLI_SRC   := $(sort $(wildcard sim/cli/*.c))
# Executor, no MPI: the backend-neutral model and interfaces (exec/core/*.c)
# and the CPU backend with its kernels (exec/cpu/*.c).
XCPU_SRC  := $(sort $(wildcard exec/core/*.c exec/cpu/*.c))
# Executor runtime (MPI): exec/*.c; exec/trainexec.c holds main().
XRT_SRC   := $(filter-out exec/trainexec.c,$(sort $(wildcard exec/*.c)))
# CUDA backend: exec/cuda/*.c (host code) + kernels/*.cu.
XCUDA_C   := $(sort $(wildcard exec/cuda/*.c))
XCUDA_CU  := $(sort $(wildcard kernels/*.cu))

UNIT_SRC  := $(sort $(wildcard tests/unit/test_*.c))
MPI_TSRC  := $(sort $(wildcard tests/mpi/test_*.c))
GPU_TSRC  := $(sort $(wildcard tests/gpu/test_*.c))
BENCH_SRC := $(sort $(wildcard tests/bench/bench_*.c))
# Fuzz harnesses: tests/fuzz/fuzz_<target>.c, each one LLVMFuzzerTestOneInput.
FUZZ_SRC  := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_NAMES := $(patsubst tests/fuzz/%.c,%,$(FUZZ_SRC))

obj = $(patsubst %.c,$(BUILD)/%.o,$(1))
SIM_OBJ  := $(call obj,$(SIM_SRC))
CLI_OBJ  := $(call obj,$(CLI_SRC))
XCPU_OBJ := $(call obj,$(XCPU_SRC))
XRT_OBJ  := $(patsubst %.c,$(BUILD)/mpi/%.o,$(XRT_SRC))

LIBSIM  := $(BUILD)/libtrainsim.a
LIBXCPU := $(BUILD)/libtexcpu.a
LIBXRT  := $(BUILD)/libtexrt.a
TRAINSIM  := $(BUILD)/trainsim
TRAINEXEC := $(BUILD)/trainexec
UNIT_BIN  := $(patsubst tests/unit/%.c,$(BUILD)/tests/unit/%,$(UNIT_SRC))
MPI_TBIN  := $(patsubst tests/mpi/%.c,$(BUILD)/tests/mpi/%,$(MPI_TSRC))
BENCH_BIN := $(patsubst tests/bench/%.c,$(BUILD)/tests/bench/%,$(BENCH_SRC))
# The harnesses linked with tests/fuzz/replay.c (a main() feeding them files)
# by the ordinary compiler: make test replays the saved inputs with them.
FUZZ_REPLAY_BIN := $(patsubst tests/fuzz/%.c,$(BUILD)/tests/fuzz/%,$(FUZZ_SRC))

TARGETS := $(TRAINSIM)
ifeq ($(HAVE_MPI)$(if $(wildcard exec/trainexec.c),1),11)
TARGETS += $(TRAINEXEC)
endif
ifeq ($(HAVE_CUDA),1)
CUDA_CFLAGS  := -isystem $(CUDA_HOME)/include -DTRAINSIM_CUDA=1
CUDA_LIBS    := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lnccl -lcudart -lstdc++
NVCCFLAGS    ?= -O3 -std=c++17 -Xcompiler -Wall,-Wextra,-Werror -Werror all-warnings \
                -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
XCUDA_OBJ    := $(patsubst %.c,$(BUILD)/mpi/%.o,$(XCUDA_C)) $(patsubst %.cu,$(BUILD)/%.cu.o,$(XCUDA_CU))
GPU_TBIN     := $(patsubst tests/gpu/%.c,$(BUILD)/tests/gpu/%,$(GPU_TSRC))
CUDACAL      := $(BUILD)/cudacal
EMU_TBIN     := $(BUILD)/tests/emu/test_kernels_emu $(BUILD)/tests/emu/test_moe_emu $(BUILD)/tests/emu/test_moe_layer_emu
TARGETS      += $(GPU_TBIN) $(CUDACAL) $(EMU_TBIN)
endif

# Search across MPI ranks: the same commands built with mpicc and
# TRAINSIM_MPI, so `mpirun -np K build/trainsim-mpi search ...` splits the
# simulations across ranks (sim/cli/search_mpi.h); the library needs no MPI.
TRAINSIM_MPI := $(BUILD)/trainsim-mpi
CLI_MPI_OBJ  := $(patsubst %.c,$(BUILD)/mpi/%.o,$(CLI_SRC))
$(CLI_MPI_OBJ): CPPFLAGS += -DTRAINSIM_MPI=1
ifeq ($(HAVE_MPI),1)
TARGETS += $(TRAINSIM_MPI)
endif

.PHONY: all summary test test-sanitize bench plots lint clean help format
all: summary $(TARGETS)

yes = $(if $(1),✓,✗)
summary:
	@echo "trainsim build ($(BUILD)):"
	@echo "  $(call yes,$(HAVE_GSL)) GSL  $(call yes,$(HAVE_CSV)) libcsv  $(call yes,$(HAVE_OPENBLAS)) OpenBLAS  $(call yes,$(HAVE_CRITERION)) Criterion   -> trainsim, CPU kernels$(if $(HAVE_CRITERION),, (no unit tests: install libcriterion-dev))"
	@echo "  $(call yes,$(HAVE_MPI)) MPI ($(or $(MPICC),no mpicc))   -> $(if $(HAVE_MPI),trainexec + MPI tests,no trainexec, no MPI tests)"
	@echo "  $(call yes,$(HAVE_CUDA)) CUDA ($(or $(NVCC),no nvcc); cuBLASLt, NCCL)   -> $(if $(HAVE_CUDA),CUDA backend + GPU tests,CPU backend only$(if $(SAN), (sanitizer build)))"

# ---------------------------------------------------------------- rules
$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/mpi/%.o: %.c
	@mkdir -p $(dir $@)
	$(MPICC) $(CPPFLAGS) $(CFLAGS) $(CUDA_CFLAGS) -c $< -o $@

$(BUILD)/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -I. -MMD -MP -c $< -o $@

$(LIBSIM): $(SIM_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(LIBXCPU): $(XCPU_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(LIBXRT): $(XRT_OBJ) $(XCUDA_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(TRAINSIM): $(CLI_OBJ) $(LIBSIM)
	$(CC) $(LDFLAGS) $(CLI_OBJ) $(LIBSIM) $(LIBS_SIM) -o $@

$(TRAINSIM_MPI): $(CLI_MPI_OBJ) $(LIBSIM)
	$(MPICC) $(LDFLAGS) $(CLI_MPI_OBJ) $(LIBSIM) $(LIBS_SIM) -o $@

$(TRAINEXEC): $(BUILD)/mpi/exec/trainexec.o $(LIBXRT) $(LIBXCPU) $(LIBSIM)
	$(MPICC) $(LDFLAGS) $^ $(CUDA_LIBS) $(LIBS_SIM) -o $@

$(BUILD)/tests/unit/%: tests/unit/%.c $(LIBXCPU) $(LIBSIM)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) $< $(LIBXCPU) $(LIBSIM) $(LIBS_SIM) $(LIBS_TEST) -o $@

$(BUILD)/tests/mpi/%: tests/mpi/%.c $(LIBXRT) $(LIBXCPU) $(LIBSIM)
	@mkdir -p $(dir $@)
	$(MPICC) $(CPPFLAGS) $(CFLAGS) $(CUDA_CFLAGS) $(LDFLAGS) $< $(LIBXRT) $(LIBXCPU) $(LIBSIM) $(CUDA_LIBS) $(LIBS_SIM) -o $@

$(BUILD)/tests/gpu/%: tests/gpu/%.c $(LIBXRT) $(LIBXCPU) $(LIBSIM)
	@mkdir -p $(dir $@)
	$(MPICC) $(CPPFLAGS) $(CFLAGS) $(CUDA_CFLAGS) $(LDFLAGS) $< $(LIBXRT) $(LIBXCPU) $(LIBSIM) $(CUDA_LIBS) $(LIBS_SIM) -o $@

# kernels/llama.cu and flash.cu compiled as host C++ against tests/emu's
# common.cuh (their threads run on the CPU), tested against the CPU twins:
# runs without a GPU; needs the CUDA headers only.
EMU_CU := kernels/llama.cu kernels/flash.cu
$(BUILD)/tests/emu/test_kernels_emu: tests/emu/test_kernels_emu.cpp tests/emu/kernels/common.cuh $(EMU_CU) kernels/cuk.h \
                                     $(LIBXCPU) $(LIBSIM)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++20 -O1 -Wall -Wextra -Werror -pthread -Itests/emu -I. -isystem $(CUDA_HOME)/include \
	  -x c++ $(EMU_CU) -x none $< $(LIBXCPU) $(LIBSIM) $(LIBS_SIM) -o $@

# kernels/moe.cu the same way, against exec/core/moe_route.c and moe.c's loops,
# and composed into a one-rank layer against moe.c's forward and backward.
$(BUILD)/tests/emu/test_moe_emu $(BUILD)/tests/emu/test_moe_layer_emu: $(BUILD)/tests/emu/%: tests/emu/%.cpp \
                                 tests/emu/kernels/common.cuh kernels/moe.cu kernels/cuk.h $(LIBXCPU) $(LIBSIM)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++20 -O1 -Wall -Wextra -Werror -pthread -Itests/emu -I. -isystem $(CUDA_HOME)/include \
	  -x c++ kernels/moe.cu -x none $< $(LIBXCPU) $(LIBSIM) $(LIBS_SIM) -o $@

$(BUILD)/cudacal: exec/cuda/tools/cudacal.c $(LIBXRT) $(LIBXCPU) $(LIBSIM)
	@mkdir -p $(dir $@)
	$(MPICC) $(CPPFLAGS) $(CFLAGS) $(CUDA_CFLAGS) $(LDFLAGS) $< $(LIBXRT) $(LIBXCPU) $(LIBSIM) $(CUDA_LIBS) $(LIBS_SIM) -o $@

$(BUILD)/tests/bench/%: tests/bench/%.c $(LIBSIM)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) $< $(LIBSIM) $(LIBS_SIM) -o $@

$(BUILD)/tests/fuzz/%: tests/fuzz/%.c tests/fuzz/replay.c $(LIBSIM)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) $< tests/fuzz/replay.c $(LIBSIM) $(LIBS_SIM) -o $@

# ---------------------------------------------------------------- tests
TEST_BINS := $(TARGETS) $(if $(HAVE_CRITERION),$(UNIT_BIN)) $(if $(HAVE_MPI),$(MPI_TBIN)) $(FUZZ_REPLAY_BIN)
test: summary $(TEST_BINS)
	@BUILD=$(BUILD) HAVE_MPI=$(HAVE_MPI) HAVE_CUDA=$(HAVE_CUDA) HAVE_CRITERION=$(HAVE_CRITERION) \
	  MPIRUN="$(MPIRUN)" SANITIZE="$(if $(SAN),1)" bash tests/run.sh

SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
test-sanitize:
	$(MAKE) BUILD=build-san OPT="-O1 -g" SAN="$(SAN_FLAGS)" test

bench: summary $(TRAINSIM) $(BENCH_BIN)
	@BUILD=$(BUILD) bash tests/bench/run.sh

# ---------------------------------------------------------------- fuzzing
# The library is built again with clang and -fsanitize=fuzzer-no-link (plus
# ASan and UBSan) into build-fuzz/, by this Makefile; each harness is linked
# with -fsanitize=fuzzer, libFuzzer's main(). tests/fuzz/run.sh runs them.
FUZZ_CC      ?= $(shell command -v clang-14 2>/dev/null || command -v clang 2>/dev/null)
FUZZ_BUILD   := build-fuzz
FUZZ_SAN     := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
FUZZ_SECONDS ?= 60
FUZZ_SEED    ?= 1
FUZZ_BIN     := $(addprefix $(FUZZ_BUILD)/,$(FUZZ_NAMES))
.PHONY: fuzz fuzz-ci fuzz-build
fuzz-build:
	@test -n "$(FUZZ_CC)" || { echo "make fuzz: no clang found (./install.sh installs it)" >&2; exit 1; }
	$(MAKE) BUILD=$(FUZZ_BUILD) CC=$(FUZZ_CC) OPT="-O1 -g" SAN="$(FUZZ_SAN) -fsanitize=fuzzer-no-link" $(FUZZ_BIN)
$(FUZZ_BIN): $(FUZZ_BUILD)/%: tests/fuzz/%.c $(wildcard tests/fuzz/*.h) $(FUZZ_BUILD)/libtrainsim.a
	$(FUZZ_CC) $(CPPFLAGS) $(CSTD) $(WARN) -O1 -g $(FUZZ_SAN) -fsanitize=fuzzer $< $(FUZZ_BUILD)/libtrainsim.a $(LIBS_SIM) -o $@
fuzz: fuzz-build
	@FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_UPDATE=$(FUZZ_UPDATE) FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_SEED=$(FUZZ_SEED) \
	  FUZZ_RUNS=$(FUZZ_RUNS) bash tests/fuzz/run.sh $(FUZZ_NAMES)
fuzz-ci:
	$(MAKE) fuzz FUZZ_SECONDS=30

plots: summary $(TARGETS)
	@BUILD=$(BUILD) bash experiments/run-all.sh

# ---------------------------------------------------------------- lint
# Each .c file is checked with the defines and include paths of the build that
# compiles it, in one of four variants:
#   c     plain cc: the library, the commands, the CPU executor, unit tests,
#         benchmarks, the fuzz harnesses (as make test builds them, with
#         tests/fuzz/replay.c) and experiments/cost-fit/fit.c
#   mpi   the commands again as build/trainsim-mpi compiles them (TRAINSIM_MPI)
#   x     the MPI runtime exec/*.c and tests/mpi (mpicc; TRAINSIM_CUDA where
#         the CUDA headers are present, as a CUDA build compiles them)
#   cuda  the CUDA host code exec/cuda/, cudacal and tests/gpu (mpicc + CUDA)
# MPI and CUDA headers are system headers to clang-tidy (-isystem): never
# reported.
# clang-tidy needs them to parse a file, so without mpicc (or without the CUDA
# headers) it skips those variants and says so; cppcheck checks every file
# anyway (it resolves no system header; --suppress=missingIncludeSystem).
# kernels/*.cu (CUDA C++) are outside both tools' C checks.
# One phony target per file and tool, so make -j2 lint runs them side by side;
# each prints its output in one piece and fails on any finding.
CPPCHECK   ?= cppcheck
CLANG_TIDY ?= clang-tidy
MPI_INC    := $(if $(MPICC),$(patsubst -I%,%,$(filter -I%,$(shell $(MPICC) --showme:compile 2>/dev/null || $(MPICC) -show 2>/dev/null))))
LINT_CUDA  := $(if $(wildcard $(CUDA_HOME)/include/cublasLt.h),$(if $(wildcard $(CUDA_HOME)/include/nccl.h),1))

LINT_SRC_c    := $(SIM_SRC) $(CLI_SRC) $(XCPU_SRC) $(UNIT_SRC) $(BENCH_SRC) \
                 $(FUZZ_SRC) tests/fuzz/replay.c $(sort $(wildcard experiments/*/*.c))
LINT_SRC_mpi  := $(CLI_SRC)
LINT_SRC_x    := $(sort $(wildcard exec/*.c)) $(MPI_TSRC)
LINT_SRC_cuda := $(XCUDA_C) $(sort $(wildcard exec/cuda/tools/*.c)) $(GPU_TSRC)
# Per variant: defines, and system include directories.
LINT_DEFS_c    := -D_POSIX_C_SOURCE=200809L
LINT_DEFS_mpi  := $(LINT_DEFS_c) -DTRAINSIM_MPI=1
LINT_DEFS_x    := $(LINT_DEFS_c) $(if $(LINT_CUDA),-DTRAINSIM_CUDA=1)
LINT_DEFS_cuda := $(LINT_DEFS_c) -DTRAINSIM_CUDA=1
LINT_SYS_mpi   := $(MPI_INC)
LINT_SYS_x     := $(MPI_INC) $(if $(LINT_CUDA),$(CUDA_HOME)/include)
LINT_SYS_cuda  := $(MPI_INC) $(CUDA_HOME)/include
# The variants clang-tidy can parse on this machine.
LINT_TIDY_VARIANTS := c $(if $(MPI_INC),mpi x $(if $(LINT_CUDA),cuda))
LINT_TIDY_SKIPPED  := $(filter-out $(LINT_TIDY_VARIANTS),c mpi x cuda)

# cppcheck checks the one configuration that -D gives. It reads the MPI
# headers (plain C) but not CUDA's, which stop any compiler they do not know
# (#error in crt/host_defines.h); clang-tidy reads those. Not reported:
# missingIncludeSystem (system headers are left unread on purpose) and
# varFuncNullUB (NULL ending a variadic list: POSIX defines NULL as
# (void *)0, so it has the type the callee reads). tests/unit/criterion.cfg
# tells cppcheck what Criterion's macros mean.
CPPCHECK_FLAGS := -q --enable=warning,performance,portability --std=c11 \
                  --error-exitcode=1 --inline-suppr --suppress=missingIncludeSystem \
                  --suppress=varFuncNullUB --library=posix --template=gcc
LINT_CPPCHECK_INC_mpi  := $(MPI_INC)
LINT_CPPCHECK_INC_x    := $(MPI_INC)
LINT_CPPCHECK_INC_cuda := $(MPI_INC)
# clang-tidy: the checks are in .clang-tidy; the compiler's own warnings
# (clang's, beyond gcc's) count as findings too, hence $(WARN) without -Werror.
TIDY_CFLAGS := $(filter -std=%,$(CSTD)) $(filter-out -Werror,$(WARN))

LINT_CPPCHECK := $(foreach v,c mpi x cuda,$(addprefix lint-cppcheck/$(v)/,$(LINT_SRC_$(v))))
LINT_TIDY     := $(foreach v,$(LINT_TIDY_VARIANTS),$(addprefix lint-tidy/$(v)/,$(LINT_SRC_$(v))))
.PHONY: $(LINT_CPPCHECK) $(LINT_TIDY)

# Runs $(1) and prints its output in one piece (no interleaving under -j),
# less clang's count of the warnings it was told to hide.
lint_run = out=$$($(1) 2>&1); rc=$$?; out=$$(printf '%s\n' "$$out" | grep -Ev '^[0-9]+ warnings? generated\.$$'); \
           if [ -n "$$out" ]; then printf '%s\n' "$$out"; fi; exit $$rc
define lint_rules
$(filter lint-cppcheck/$(1)/%,$(LINT_CPPCHECK)): lint-cppcheck/$(1)/%: %
	@$$(call lint_run,$$(CPPCHECK) $$(CPPCHECK_FLAGS) $$(CPPCHECK_LIB) -I. $$(LINT_DEFS_$(1)) $$(addprefix -I,$$(LINT_CPPCHECK_INC_$(1))) $$<)
$(filter lint-tidy/$(1)/%,$(LINT_TIDY)): lint-tidy/$(1)/%: %
	@$$(call lint_run,$$(CLANG_TIDY) --quiet $$< -- -I. $$(LINT_DEFS_$(1)) $$(addprefix -isystem,$$(LINT_SYS_$(1))) $$(TIDY_CFLAGS))
endef
$(foreach v,c mpi x cuda,$(eval $(call lint_rules,$(v))))
$(addprefix lint-cppcheck/c/,$(UNIT_SRC)): CPPCHECK_LIB := --library=tests/unit/criterion.cfg

# The architecture: every include goes down the package layers, and no
# modules include each other in a circle.
lint-layers:
	@bash tests/lint/layers.sh
# The one style: clang-format would change nothing.
lint-format:
	@clang-format --dry-run --Werror $(FORMAT_SRC) && echo "lint-format: every file is in .clang-format's style"
.PHONY: lint-layers lint-format

lint: $(LINT_CPPCHECK) $(LINT_TIDY) lint-layers lint-format
	@echo "lint: clean: cppcheck on $(words $(LINT_CPPCHECK)), clang-tidy on $(words $(LINT_TIDY)) file checks (variants: $(LINT_TIDY_VARIANTS))"
	@$(if $(LINT_TIDY_SKIPPED),echo "lint: clang-tidy SKIPPED variants $(LINT_TIDY_SKIPPED): $(if $(MPI_INC),,no mpicc )$(if $(LINT_CUDA),,no CUDA headers in $(CUDA_HOME)/include)",true)

clean:
	rm -rf build build-san build-fuzz

help:
	@sed -n '/^#   make/s/^#   //p' Makefile

# Every C, CUDA and header file the project owns, in one style.
FORMAT_SRC = $(shell git ls-files '*.c' '*.h' '*.cu' '*.cuh' 2>/dev/null)
format:
	clang-format -i $(FORMAT_SRC)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
