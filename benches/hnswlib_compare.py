#!/usr/bin/env python3
"""Benchmark the Python package hnswlib on prepared vector files.

This script is the Python half of a comparison between the Rust crate hnsw_rs
and hnswlib. Both sides read the same raw files, so the numbers are directly
comparable:

  * DATA.f32    n x dim little-endian f32, row-major, vectors unit-normalised.
  * QUERIES.f32 q x dim, same layout.
  * TRUTH.u32   q x k little-endian u32, exact top-k row ids per query,
                nearest first.

It builds an inner-product index (equal to cosine on unit vectors), times the
build, then for every requested ef runs the queries one at a time on a single
thread and records recall@k, p50/p99 latency and QPS. Exactly one JSON object
is written to stdout; progress and errors go to stderr.

Typical use (hnswlib and numpy live in a project-local virtual environment):

  python3 -m venv target/bench-venv
  target/bench-venv/bin/pip install hnswlib numpy
  python3 benches/hnswlib_compare.py --data DATA.f32 --queries QUERIES.f32 \
      --truth TRUTH.u32 --dim 384 --k 10 --m 16 --ef-construction 200 \
      --efs 16,32,64,128,256 --threads 1

When hnswlib or numpy cannot be imported by the running interpreter and the
venv above exists, the script re-runs itself with the venv's interpreter.
"""

import argparse
import json
import os
import resource
import sys
import tempfile
import time

# The venv that the re-run falls back to, relative to the repository root.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_PYTHON = os.path.join(REPO_ROOT, "target", "bench-venv", "bin", "python")
# Set on the re-run so that a venv lacking the packages cannot loop forever.
REEXEC_MARKER = "HNSWLIB_COMPARE_REEXEC"


def log(message):
    """Write one progress line to stderr, keeping stdout for the JSON only."""
    print(message, file=sys.stderr, flush=True)


def fail(message, code=2):
    """Report a fatal problem on stderr and exit with a non-zero status."""
    print(f"hnswlib_compare: error: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


def import_dependencies():
    """Import numpy and hnswlib, falling back to the project venv if needed.

    Returns the two modules. If they are missing and the venv interpreter
    exists (and we are not already a re-run), the process is replaced by the
    same command under that interpreter. Otherwise it exits with a message
    saying how to install them.
    """
    try:
        import numpy
        import hnswlib
        return numpy, hnswlib
    except ImportError as err:
        missing = err.name or str(err)
    already_reexeced = os.environ.get(REEXEC_MARKER) == "1"
    # The venv's python is usually a symlink to the base interpreter, so the
    # running environment is recognised by its prefix, not its executable.
    venv_dir = os.path.dirname(os.path.dirname(VENV_PYTHON))
    running_venv = os.path.realpath(sys.prefix) == os.path.realpath(venv_dir)
    if os.path.exists(VENV_PYTHON) and not already_reexeced and not running_venv:
        log(f"'{missing}' not importable by {sys.executable}; re-running with {VENV_PYTHON}")
        os.environ[REEXEC_MARKER] = "1"
        os.execv(VENV_PYTHON, [VENV_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])
    fail(
        f"Python module '{missing}' is missing. Install the benchmark dependencies with:\n"
        f"  python3 -m venv {os.path.dirname(os.path.dirname(VENV_PYTHON))}\n"
        f"  {os.path.join(os.path.dirname(VENV_PYTHON), 'pip')} install hnswlib numpy"
    )


def parse_args():
    """Parse and sanity-check the command line."""
    parser = argparse.ArgumentParser(description="Benchmark hnswlib on raw f32/u32 files.")
    parser.add_argument("--data", required=True, help="n x dim little-endian f32 base vectors")
    parser.add_argument("--queries", required=True, help="q x dim little-endian f32 query vectors")
    parser.add_argument("--truth", required=True, help="q x k little-endian u32 exact neighbour ids")
    parser.add_argument("--dim", type=int, required=True, help="vector dimension")
    parser.add_argument("--k", type=int, default=10, help="neighbours per query (default 10)")
    parser.add_argument("--m", type=int, default=16, help="HNSW M (default 16)")
    parser.add_argument("--ef-construction", type=int, default=200,
                        help="HNSW ef_construction (default 200)")
    parser.add_argument("--efs", default="16,32,64,128,256",
                        help="comma-separated search ef values (default 16,32,64,128,256)")
    parser.add_argument("--threads", type=int, default=1,
                        help="threads used while inserting (default 1); queries always use 1")
    parser.add_argument("--seed", type=int, default=100,
                        help="random seed of the index's level generator (default 100)")
    args = parser.parse_args()

    for name in ("dim", "k", "m", "ef_construction", "threads"):
        if getattr(args, name) < 1:
            fail(f"--{name.replace('_', '-')} must be at least 1")
    try:
        args.efs = [int(part) for part in args.efs.split(",") if part.strip()]
    except ValueError:
        fail(f"--efs must be a comma-separated list of integers, got '{args.efs}'")
    if not args.efs or min(args.efs) < 1:
        fail("--efs must list at least one positive integer")
    return args


def load_matrix(np, path, dtype, width, what):
    """Read a raw little-endian matrix with `width` columns from `path`.

    The file size must be a non-zero multiple of one row, otherwise the
    script stops with a message naming the file and the sizes involved.
    """
    try:
        size = os.path.getsize(path)
    except OSError as err:
        fail(f"cannot read {what} file '{path}': {err.strerror}")
    row_bytes = width * np.dtype(dtype).itemsize
    if size == 0 or size % row_bytes != 0:
        fail(
            f"{what} file '{path}' has {size} bytes, which is not a non-zero multiple "
            f"of one row ({width} x {np.dtype(dtype).itemsize} = {row_bytes} bytes)"
        )
    flat = np.fromfile(path, dtype=dtype)
    # Rows must be C-contiguous so hnswlib can read them without copying.
    return np.ascontiguousarray(flat.reshape(size // row_bytes, width))


def peak_rss_kib():
    """Peak resident set size of this process so far (KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def package_version(hnswlib):
    """Best-effort version string of the installed hnswlib distribution."""
    try:
        from importlib.metadata import version
        return version("hnswlib")
    except Exception:
        return getattr(hnswlib, "__version__", "unknown")


def main():
    np, hnswlib = import_dependencies()
    args = parse_args()

    # Load the three files as explicit little-endian types and check that
    # their shapes agree with each other and with --dim / --k.
    data = load_matrix(np, args.data, "<f4", args.dim, "data")
    queries = load_matrix(np, args.queries, "<f4", args.dim, "queries")
    truth = load_matrix(np, args.truth, "<u4", args.k, "truth")
    n, q = data.shape[0], queries.shape[0]
    if truth.shape[0] != q:
        fail(
            f"truth file has {truth.shape[0]} rows of k={args.k} ids but the queries file "
            f"has {q} vectors of dim={args.dim}; sizes do not match"
        )
    if int(truth.max()) >= n:
        fail(f"truth file contains id {int(truth.max())}, but data has only {n} rows")
    if args.k > n:
        fail(f"--k={args.k} is larger than the number of data vectors ({n})")
    log(f"loaded data {n}x{args.dim}, queries {q}x{args.dim}, truth {q}x{args.k}")

    # The "before" figure is the peak so far, which already includes the
    # loaded vectors; the difference to "after" is what the build added.
    rss_before = peak_rss_kib()

    # Build the index with the requested parameters, inserting rows with
    # their row index as the label so results compare directly with TRUTH.
    index = hnswlib.Index(space="ip", dim=args.dim)
    index.init_index(max_elements=n, ef_construction=args.ef_construction, M=args.m,
                     random_seed=args.seed)
    log(f"building: M={args.m} ef_construction={args.ef_construction} threads={args.threads}")
    labels = np.arange(n, dtype=np.uint64)
    started = time.perf_counter()
    index.add_items(data, labels, num_threads=args.threads)
    build_seconds = time.perf_counter() - started
    rss_after = peak_rss_kib()
    count = index.get_current_count()
    if count != n:
        fail(f"index holds {count} elements after the build, expected {n}", code=1)
    log(f"built {count} elements in {build_seconds:.3f} s")

    # Measure the index size as the size of its serialised form on disk.
    with tempfile.TemporaryDirectory(prefix="hnswlib_compare_") as tmp:
        path = os.path.join(tmp, "index.bin")
        index.save_index(path)
        index_bytes = os.path.getsize(path)
    log(f"serialised index: {index_bytes} bytes")

    # Each ef gets one pass over all queries, one call per query, timed with
    # a monotonic nanosecond clock around just the knn_query call.
    runs = []
    truth_sets = [set(row.tolist()) for row in truth]
    for ef in args.efs:
        index.set_ef(ef)
        latencies_ns = np.empty(q, dtype=np.int64)
        hits = 0
        for i in range(q):
            query = queries[i]
            t0 = time.perf_counter_ns()
            found, _distances = index.knn_query(query, k=args.k, num_threads=1)
            latencies_ns[i] = time.perf_counter_ns() - t0
            hits += len(truth_sets[i].intersection(found[0].tolist()))
        latencies_us = latencies_ns / 1000.0
        total_seconds = latencies_ns.sum() / 1e9
        run = {
            "ef": ef,
            "recall": hits / (q * args.k),
            "p50_us": float(np.percentile(latencies_us, 50)),
            "p99_us": float(np.percentile(latencies_us, 99)),
            "qps": q / total_seconds if total_seconds > 0 else float("inf"),
        }
        runs.append(run)
        log(f"ef={ef}: recall={run['recall']:.4f} p50={run['p50_us']:.1f}us "
            f"p99={run['p99_us']:.1f}us qps={run['qps']:.0f}")

    result = {
        "library": "hnswlib",
        "version": package_version(hnswlib),
        "n": n,
        "dim": args.dim,
        "m": args.m,
        "ef_construction": args.ef_construction,
        "build_seconds": build_seconds,
        "index_bytes": index_bytes,
        "rss_kib_before": rss_before,
        "rss_kib_after": rss_after,
        "runs": runs,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
