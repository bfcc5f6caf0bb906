"""Hostile and careless use from Python (issue 31): every bad input is a clear error that names
the argument and changes nothing, shared memory cannot be written by a reader, a lease's pins
are its own, and no call crashes the interpreter (not even at exit)."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ccht


# ---- case 7: bulk calls in daemon threads at interpreter exit -----------------------------------

DAEMON = textwrap.dedent("""
    import sys, threading, numpy as np, ccht
    which, path = sys.argv[1], sys.argv[2]
    if which == "find":
        t = ccht.Table(slots=1 << 19)
        keys = np.arange(1, 1 << 18, dtype=np.uint64)
        t.insert(keys, keys)
        call = lambda: t.find(keys)
    elif which == "acquire":
        pc = ccht.PageCache(num_pages=1 << 14, page_bytes=64)
        keys = np.arange(1, 1 << 14, dtype=np.uint64)
        call = lambda: pc.acquire(keys).close()
    else:
        from safetensors.numpy import save_file
        save_file({f"w{i}": np.ones(1 << 14, dtype=np.float32) for i in range(32)}, path)
        wc = ccht.WeightCache(budget_bytes=16 << 20, page_bytes=4096)
        call = lambda: wc.load(path).close()
    running = threading.Event()
    def loop():
        while True:
            call()
            running.set()
    threading.Thread(target=loop, daemon=True).start()
    running.wait(60)
    # exit now: the daemon thread is in (or about to enter) a bulk call without the GIL
""")


@pytest.mark.parametrize("call", ["find", "acquire", "load"])
def test_a_daemon_thread_in_a_bulk_call_does_not_abort_the_exit(tmp_path, call):
    script = tmp_path / "daemon.py"
    script.write_text(DAEMON)
    runs = [subprocess.Popen([sys.executable, str(script), call, str(tmp_path / f"m{i}.st")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for i in range(5)]
    for p in runs:
        _, err = p.communicate(timeout=120)
        assert "terminate called" not in err and "Fatal Python error" not in err, err[-2000:]
        assert p.returncode == 0, (p.returncode, err[-2000:])
