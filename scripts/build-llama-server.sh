#!/usr/bin/env bash
# Builds llama.cpp's llama-server (the reference we benchmark against) from the llama.cpp that the
# llama-cpp-python sdist on PyPI vendors, into a cache outside the repository. Prints the binary's
# path (llama-perplexity lands beside it); a second run finds it and prints it at once.
#
#   scripts/build-llama-server.sh            # build (or find) and print the path
#   LLAMA_CPP_PYTHON_VERSION=0.3.36 JOBS=2 scripts/build-llama-server.sh
#
# ISA flags come from /proc/cpuinfo with GGML_NATIVE=OFF rather than -march=native: some VMs
# advertise AMX in cpuid but trap on tile instructions (a native build dies with SIGILL), so AMX
# is off by default and every other extension is switched on only when the CPU lists it.
#
# AMX=1 builds llama.cpp's AMX backend as well (GGML_AMX_TILE, GGML_AMX_INT8 and GGML_AMX_BF16
# on, the rest as above) into build-amx/ beside build/ (log build-amx.log), from the same source,
# so both binaries can be compared:
#
#   AMX=1 scripts/build-llama-server.sh      # prints .../build-amx/bin/llama-server
#
# The AMX backend repacks the matrices it has kernels for (Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K,
# IQ4_XS) into a buffer type of its own, which exists only when the kernel grants the tile state
# (arch_prctl(ARCH_REQ_XCOMP_PERM); else it prints "AMX is not ready to be used!" and the vector
# paths run). What is known of it (issue 52): on a 2-core Intel Xeon VM with AMX, this
# version's AMX build (0.3.36) died with SIGILL at a `tilezero` in ggml_backend_amx_mul_mat,
# while a program that asks for the tile state itself ran tiles there. On the 2026-12-07 build
# machine (no amx_* flags in /proc/cpuinfo) it configures and its amx.cpp compiles with gcc 12,
# but it was neither built whole nor run, as it could not be tested without AMX. Try it on an
# AMX machine with `$(AMX=1 scripts/build-llama-server.sh) -m FILE` and record whether it
# serves or traps.
set -euo pipefail
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
JOBS="${JOBS:-2}"
AMX="${AMX:-0}"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/tokenmill/llama.cpp/$VERSION"
case "$AMX" in
  0) SUFFIX="" ;;
  1) SUFFIX="-amx" ;;
  *) echo "AMX must be 0 or 1" >&2; exit 2 ;;
esac
BUILD="$CACHE/build$SUFFIX"
BIN="$BUILD/bin/llama-server"
LOG="$CACHE/build$SUFFIX.log"

if [ -x "$BIN" ]; then
  echo "$BIN"; exit 0
fi
mkdir -p "$CACHE"
echo "building llama-server from llama-cpp-python $VERSION; log: $LOG" >&2
: >"$LOG"

# cmake and ninja from PyPI wheels in a venv of their own, so the host needs only python3 and a
# C/C++ compiler.
VENV="$CACHE/venv"
if [ ! -x "$VENV/bin/cmake" ] || [ ! -x "$VENV/bin/ninja" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet cmake ninja >>"$LOG" 2>&1
fi

# Only llama-cpp-python itself as an sdist: `--no-binary :all:` would also force pip to build the
# sdist's build requirements (cmake among them) from source just to read its metadata.
SRC="$CACHE/src"
if [ ! -f "$SRC/vendor/llama.cpp/CMakeLists.txt" ]; then
  DL="$CACHE/download"
  mkdir -p "$DL"
  "$VENV/bin/pip" download --quiet --no-deps --no-binary llama-cpp-python \
    "llama-cpp-python==$VERSION" -d "$DL" >>"$LOG" 2>&1
  rm -rf "$SRC" "$CACHE/unpack"
  mkdir -p "$CACHE/unpack"
  tar -xzf "$DL/llama_cpp_python-$VERSION.tar.gz" -C "$CACHE/unpack"
  mv "$CACHE/unpack/llama_cpp_python-$VERSION" "$SRC"
  rmdir "$CACHE/unpack"
fi
LLAMA="$SRC/vendor/llama.cpp"

# Maps a GGML option to the cpuinfo flags it needs (all of them). GGML_AVX512 compiles with
# -mavx512f/cd/vl/dq/bw, so it asks for all five.
CPU_FLAGS=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has_all() {
  local f
  for f in "$@"; do
    case "$CPU_FLAGS" in *" $f "*) ;; *) return 1 ;; esac
  done
}
declare -a ISA=(
  "GGML_SSE42 sse4_2"
  "GGML_AVX avx"
  "GGML_AVX2 avx2"
  "GGML_BMI2 bmi2"
  "GGML_FMA fma"
  "GGML_F16C f16c"
  "GGML_AVX_VNNI avx_vnni"
  "GGML_AVX512 avx512f avx512cd avx512vl avx512dq avx512bw"
  "GGML_AVX512_VBMI avx512vbmi"
  "GGML_AVX512_VNNI avx512_vnni"
  "GGML_AVX512_BF16 avx512_bf16"
)
if [ "$AMX" = 1 ]; then
  declare -a FLAGS=(-DGGML_NATIVE=OFF -DGGML_AMX_TILE=ON -DGGML_AMX_INT8=ON -DGGML_AMX_BF16=ON)
  has_all amx_tile amx_int8 || echo "this CPU lists no AMX-TILE/INT8: the AMX build will not use tiles here" >&2
else
  declare -a FLAGS=(-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
fi
for entry in "${ISA[@]}"; do
  read -r option needs <<<"$entry"
  # Options differ between llama.cpp versions; pass only those this one declares.
  grep -q "option($option " "$LLAMA/ggml/CMakeLists.txt" || continue
  # shellcheck disable=SC2086 # needs is a list of flags
  if has_all $needs; then FLAGS+=("-D$option=ON"); else FLAGS+=("-D$option=OFF"); fi
done
# The AVX-512 extensions only take effect on top of AVX512F.
if [[ " ${FLAGS[*]} " == *" -DGGML_AVX512=OFF "* ]]; then
  for i in "${!FLAGS[@]}"; do
    case "${FLAGS[$i]}" in -DGGML_AVX512_*=ON) FLAGS[i]="${FLAGS[$i]%=ON}=OFF" ;; esac
  done
fi
FLAGS+=(-DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DGGML_CCACHE=OFF)
echo "cmake flags: ${FLAGS[*]}" >&2
echo "cmake flags: ${FLAGS[*]}" >>"$LOG"

"$VENV/bin/cmake" -S "$LLAMA" -B "$BUILD" -G Ninja -DCMAKE_MAKE_PROGRAM="$VENV/bin/ninja" \
  "${FLAGS[@]}" >>"$LOG" 2>&1 || { echo "cmake configure failed; see $LOG" >&2; exit 1; }
# llama-perplexity too: the models page holds our perplexity to its figure on the same text.
"$VENV/bin/cmake" --build "$BUILD" --target llama-server llama-perplexity -j "$JOBS" >>"$LOG" 2>&1 ||
  { echo "build failed; see $LOG" >&2; exit 1; }
printf '%s\n' "${FLAGS[@]}" >"$CACHE/cmake-flags$SUFFIX.txt"
echo "$BIN"
