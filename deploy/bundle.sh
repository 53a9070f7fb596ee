#!/usr/bin/env bash
# Makes a self-contained folder that runs on a machine with only the NVIDIA
# driver and the CUDA runtime (no gRPC, protobuf, Abseil or apt):
#
#   deploy/bundle.sh [--out=DIR] [--with-cuda-libs] [--tar]
#
#   DIR/bin/<package>/<binary>   launchers of ps_scheduler, ps_server,
#                                ps_worker, psctl, the benchmarks and the GPU
#                                test, which run the real binary in
#                                DIR/libexec/ through the bundled loader
#   DIR/lib/                     every shared library they need, glibc and its
#                                loader included (the target's glibc may be
#                                older), except the NVIDIA driver and, unless
#                                --with-cuda-libs, the CUDA runtime and cuBLAS
#                                (cuBLASLt alone is 540 MB)
#   DIR/local_cluster.sh, DIR/jobs/, DIR/data/fortunes/
#   DIR/bin/worker/external/libpstrain_torch.so, DIR/python/pstrain,
#   DIR/examples/torch/   the PyTorch front end, for the machine's own
#                         Python and torch; DIR/lib/python/ holds the
#                         libraries it needs that such a machine lacks
#                         (gRPC, protobuf, Abseil, ...: not glibc nor
#                         libstdc++, which the machine's newer ones serve)
#
# CUDA libraries come from lib/, else $LD_LIBRARY_PATH, else the toolkit's
# lib64 (baked in at build time, and /usr/local/cuda/lib64), else the
# system's library folders. Run a job with
#   DIR/local_cluster.sh --bin=DIR/bin --job=DIR/jobs/gpt_fortunes.pbtxt
# (see DIR/README for machines without the job's data).
# --tar also writes DIR.tar.gz.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="$ROOT/dist/pstrain-bundle"
CUDA_LIBS=0
TAR=0
for arg in "$@"; do
  case "$arg" in
    --out=*) OUT="${arg#*=}" ;;
    --with-cuda-libs) CUDA_LIBS=1 ;;
    --tar) TAR=1 ;;
    *) echo "bundle: unknown argument $arg" >&2; exit 2 ;;
  esac
done

TARGETS=(
  //scheduler:ps_scheduler
  //server:ps_server
  //worker:ps_worker
  //tools:psctl
  //bench:transport_bench
  //bench:optimizer_bench
  //bench:worker_bench
  //bench:attention_sweep
  //bench:windowed_bench
  //bench:train_bench
  //kernels:cuda_backend_test
  //kernels:cudnn_attention_test
)
TORCH_LIB=worker/external/libpstrain_torch.so
cd "$ROOT"
bazel build --noshow_progress "${TARGETS[@]}" "//${TORCH_LIB%/*}:${TORCH_LIB##*/}" >&2
rm -rf "$OUT"
mkdir -p "$OUT/lib" "$OUT/jobs" "$OUT/data"
LOADER="$(ldd bazel-bin/worker/ps_worker | awk '/ld-linux/ {print $1}')"
for t in "${TARGETS[@]}"; do
  pkg="${t#//}"; pkg="${pkg%%:*}"; name="${t##*:}"
  mkdir -p "$OUT/bin/$pkg" "$OUT/libexec/$pkg"
  cp "bazel-bin/$pkg/$name" "$OUT/libexec/$pkg/$name"
  chmod u+w "$OUT/libexec/$pkg/$name"
  cat > "$OUT/bin/$pkg/$name" <<SH
#!/bin/sh
# Runs libexec/$pkg/$name with the bundle's own loader and libraries.
here="\$(cd "\$(dirname "\$0")/../.." && pwd)"
exec "\$here/lib/$(basename "$LOADER")" --library-path "\$here/lib:\${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" "\$here/libexec/$pkg/$name" "\$@"
SH
  chmod +x "$OUT/bin/$pkg/$name"
done
cp -L "$LOADER" "$OUT/lib/"
# Every library the built binaries resolve (tests link Bazel's per-library
# .so files from bazel-bin's _solib folders, found there by a relative path).
for t in "${TARGETS[@]}"; do
  pkg="${t#//}"; pkg="${pkg%%:*}"; name="${t##*:}"
  ldd "bazel-bin/$pkg/$name" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  base="$(basename "$lib")"
  case "$base" in
    ld-linux*) continue ;;  # copied above
    # The NVIDIA driver: never bundled.
    libcuda.so.*|libnvidia*) continue ;;
    libcudart.so.*|libcublas.so.*|libcublasLt.so.*)
      [ "$CUDA_LIBS" = 1 ] || continue ;;
  esac
  cp -L "$lib" "$OUT/lib/$base"
done
# The PyTorch front end: loaded by the machine's own Python, so its
# libraries go beside it without glibc, libstdc++ and libgcc_s (the
# machine's, newer, serve) -- local_cluster.sh --torch puts lib/python on
# LD_LIBRARY_PATH.
mkdir -p "$OUT/bin/worker/external" "$OUT/lib/python" "$OUT/examples"
cp "bazel-bin/$TORCH_LIB" "$OUT/bin/$TORCH_LIB"
chmod u+w "$OUT/bin/$TORCH_LIB"
ldd "bazel-bin/$TORCH_LIB" | awk '/=> \// {print $3}' | while read -r lib; do
  base="$(basename "$lib")"
  case "$base" in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libresolv.so.*) continue ;;
    ld-linux*|libstdc++.so.*|libgcc_s.so.*|libcuda.so.*|libnvidia*) continue ;;
    libcudart.so.*|libcublas.so.*|libcublasLt.so.*)
      [ "$CUDA_LIBS" = 1 ] || continue ;;
  esac
  cp -L "$lib" "$OUT/lib/python/$base"
done
tar -C "$ROOT" --exclude=__pycache__ -cf - python/pstrain examples/torch | tar -C "$OUT" -xf -
cp deploy/local_cluster.sh "$OUT/"
cp deploy/jobs/*.pbtxt "$OUT/jobs/"
if [ -d /usr/share/games/fortunes ]; then
  mkdir -p "$OUT/data/fortunes"
  find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.*' -exec cp {} "$OUT/data/fortunes/" \;
fi
cat > "$OUT/README" <<'TXT'
pstrain bundle (made by deploy/bundle.sh).

  ./local_cluster.sh --bin=$PWD/bin --job=jobs/gpt_fortunes.pbtxt
  bin/kernels/cuda_backend_test            # the GPU tests
  bin/kernels/cudnn_attention_test         # cuDNN's attention graphs (libcudnn.so.9 on the path)
  bin/bench/worker_bench                   # GPU step time, tokens/s, TFLOP/s
  bin/bench/attention_sweep                # every attention variant, checked and timed
  bin/worker/ps_worker --help
  ./local_cluster.sh --bin=$PWD/bin --job=JOB --torch=examples/torch/SCRIPT.py
                                           # PyTorch workers (python3 with torch)

Jobs name their data by absolute path (/usr/share/...); data/fortunes holds
the GPT corpus for machines without it: give workers --data_dir=$PWD/data/fortunes
(local_cluster.sh passes extra arguments after -- to the scheduler only, so
start workers by hand or edit the job's data.path).
TXT
echo "bundle: $OUT ($(du -sh "$OUT" | cut -f1); $(ls "$OUT/lib" | wc -l) libraries)" >&2
if [ "$TAR" = 1 ]; then
  tar -C "$(dirname "$OUT")" -czf "$OUT.tar.gz" "$(basename "$OUT")"
  echo "bundle: $OUT.tar.gz ($(du -sh "$OUT.tar.gz" | cut -f1))" >&2
fi
