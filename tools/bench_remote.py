#!/usr/bin/env python3
"""The remote tier's goal measurement (docs/remote-tier.md): pipelined against one-round-trip
pages/s, and the hit ratio of three tiers against an exact LRU, on the Mooncake replay.

Starts its own redis-server on a free loopback port with a temporary directory, runs
`ccht kv-replay --remote` with every --remote-pipeline setting, interleaved, --reps times each
(the database flushed before every run), and prints a Markdown table of medians.

    tools/bench_remote.py --ccht build/cpu/tools/ccht --page-bytes 256,4096 --reps 5
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], check=True,
                          capture_output=True, text=True).stdout.strip()


def replay(ccht, trace, port, args):
    cmd = [ccht, "kv-replay", "--trace", trace, "--json", *args]
    if port is not None:
        cmd += ["--remote", f"redis://127.0.0.1:{port}"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ccht", default="build/cpu/tools/ccht")
    ap.add_argument("--trace", default="../shared/traces/mooncake_synthetic.jsonl")
    ap.add_argument("--gpu-pages", type=int, default=1000)
    ap.add_argument("--host-pages", type=int, default=4000)
    ap.add_argument("--page-bytes", default="256,4096")
    ap.add_argument("--pipelines", default="1,128,512")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    if not os.path.exists(a.trace):
        sys.exit(f"trace {a.trace} not found (the shared traces folder is absent)")
    if shutil.which("redis-server") is None:
        sys.exit("redis-server not found (Debian package redis-server)")
    pipelines = [int(p) for p in a.pipelines.split(",")]
    tmp = tempfile.mkdtemp(prefix="ccht-bench-redis-")
    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no", "--dir", tmp],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                if redis(port, "ping") == "PONG":
                    break
            except subprocess.CalledProcessError:
                pass
            time.sleep(0.05)
        print(f"| page bytes | pipeline | remote pages/s (median of {a.reps}) | x one RTT "
              "| round trips | remote hits | hit ratio | exact LRU, all pages | check failures |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for pb in [int(x) for x in a.page_bytes.split(",")]:
            runs = {p: [] for p in pipelines}
            for _ in range(a.reps):
                for p in pipelines:
                    redis(port, "flushall")
                    runs[p].append(replay(a.ccht, a.trace, port, [
                        "--pages", str(a.gpu_pages), "--tiers", f"host={a.host_pages}",
                        "--policy", "page-cache", "--page-bytes", str(pb),
                        "--remote-pipeline", str(p)])[0])
            # The remote holds every page written: the exact LRU over GPU + host + remote pages.
            stored = int(redis(port, "dbsize"))
            exact = replay(a.ccht, a.trace, None, ["--policy", "lru", "--page-bytes", str(pb),
                           "--pages", str(a.gpu_pages + a.host_pages + stored)])[0]["hit_ratio"]
            base = statistics.median(r["remote_pages_per_s"] for r in runs[pipelines[0]])
            for p in pipelines:
                rs = runs[p]
                rate = statistics.median(r["remote_pages_per_s"] for r in rs)
                print(f"| {pb} | {p} | {rate:,.0f} | {rate / base:.1f} "
                      f"| {statistics.median(r['remote_round_trips'] for r in rs):,.0f} "
                      f"| {statistics.median(r['remote_hits'] for r in rs):,.0f} "
                      f"| {statistics.median(r['hit_ratio'] for r in rs):.4f} | {exact:.4f} "
                      f"| {sum(r['check_failures'] for r in rs)} |")
    finally:
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
