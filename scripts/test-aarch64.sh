#!/usr/bin/env bash
# Runs the kernel tests as an aarch64 build under qemu-user, so the NEON dot-product path
# (`neon_dotprod`) is held to the portable path's bits on an x86 machine: every path the
# (emulated) CPU has against the portable one, many shapes and batch heights; then the zoo's
# tiny f32 models end to end, so the rest of the aarch64 build (attention, the dense path,
# the engine) is held to transformers' outputs too. qemu says nothing about speed. Needs the aarch64 Rust target (rustup), a cross linker and qemu-user
# (Debian packages, installed here when missing). Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup target add aarch64-unknown-linux-gnu >/dev/null
if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null; then
  apt-get install -y -q gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user >/dev/null
fi
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
# The engine's tests are one binary (tests/it); the filters pick its kernel, sampler and zoo
# modules. Extra arguments come before them, so `-- --nocapture` still reaches libtest.
cargo test --profile ci --target aarch64-unknown-linux-gnu -p tokenmill-engine --test it "$@" \
  -- quant_matrix:: sampler:: zoo::
