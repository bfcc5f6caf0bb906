"""``python -m ccht weights ...``: the ``ccht weights`` command of the C++ CLI, from Python.

It runs the same C++ code (ccht_sim's run_weights and weights_json_lines), so with ``--json``
and ``--digest`` it prints the same JSON lines as ``ccht weights``.
"""

import argparse
import json
import os
import sys

from . import _ccht


def _weights(argv):
    p = argparse.ArgumentParser(
        prog="python -m ccht weights",
        description="Load safetensors models through ccht's weight cache as a function runtime "
        "does: invocations drawn from a Zipf popularity, cold and warm load times, hit ratio, "
        "every load checked against the file.",
    )
    p.add_argument("--file", action="append", required=True,
                   help="a safetensors file (repeat for several models)")
    p.add_argument("--budget", required=True,
                   help="cache bytes (suffixes K, M, G, KiB, MiB, GiB), a multiple of --page-bytes")
    p.add_argument("--page-bytes", default="2MiB", help="bytes per page (default 2MiB)")
    p.add_argument("--invocations", type=int, default=100, help="loads (default 100)")
    p.add_argument("--zipf", type=float, default=1.0, help="popularity exponent (default 1)")
    p.add_argument("--seed", type=int, default=1, help="seed of the popularity draws")
    p.add_argument("--layout", choices=["per-tensor", "packed"], default="per-tensor")
    p.add_argument("--io-threads", type=int, default=2, help="threads reading a fill (1..64)")
    p.add_argument("--huge-pages", choices=["auto", "on", "off"], default="auto")
    p.add_argument("--no-verify", action="store_true", help="do not compare loads with the files")
    p.add_argument("--digest", action="store_true",
                   help="also one JSON line per tensor: its CRC-32 from the cache's memory")
    p.add_argument("--json", action="store_true",
                   help="JSON Lines (the default here; accepted for the CLI's spelling)")
    a = p.parse_args(argv)
    for f in a.file:
        if not os.path.isfile(f):
            p.error(f"--file: {f}: no such file")
    if a.invocations < 0 or not 1 <= a.io_threads <= 64:
        p.error("--invocations must be >= 0 and --io-threads in [1, 64]")
    try:
        budget = _ccht.parse_bytes(a.budget, "--budget")
        page = _ccht.parse_bytes(a.page_bytes, "--page-bytes")
        lines, failures = _ccht._weights_lines(
            a.file, budget, page, a.invocations, a.zipf, a.seed, a.layout, a.io_threads,
            a.huge_pages, not a.no_verify, a.digest)
    except (ValueError, _ccht.Error) as e:
        print(f"python -m ccht weights: {e}", file=sys.stderr)
        return 2
    for line in lines:
        print(line)
    if failures:
        print(f"python -m ccht weights: {failures} tensors differed from their files",
              file=sys.stderr)
        return 1
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m ccht weights --file F [--file G ...] --budget BYTES [...]\n"
              "       python -m ccht version")
        return 0 if argv else 2
    if argv[0] == "weights":
        return _weights(argv[1:])
    if argv[0] == "version":
        from . import __version__
        print(json.dumps({"version": __version__, "cuda": _ccht.has_cuda}))
        return 0
    print(f"python -m ccht: unknown command '{argv[0]}' (expected weights or version)",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
