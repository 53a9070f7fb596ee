#!/usr/bin/env bash
# Installs every Debian package pstrain needs to build, test and run.
# Idempotent: when everything is present it only checks and returns.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap
  g++
  pkg-config
  protobuf-compiler
  protobuf-compiler-grpc
  libprotobuf-dev
  libgrpc++-dev
  libabsl-dev
  libspdlog-dev
  libfmt-dev
  libgtest-dev
  libgmock-dev
  libbenchmark-dev
  libopenblas-dev
  libmicrohttpd-dev
  zlib1g-dev
  dataset-fashion-mnist
  fortunes
  openssl
  iproute2
  clang
  libclang-rt-14-dev
  chromium
  python3-yaml
  python3-torch
  python3-venv
  gnuplot-nox
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "setup: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
