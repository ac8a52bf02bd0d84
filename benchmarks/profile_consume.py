"""Where a consumer's time goes: py-spy samples of one throughput contender, summarised.

Runs ``throughput.py child`` for one contender under ``py-spy record`` (sampling, native
extensions included with ``--native``), then prints and writes the functions with the most
samples on top of the stack (self) and anywhere in it (inclusive), as percentages of all
samples. Idle time (the event loop waiting in ``select``/``epoll``) shows as its own line.

Usage::

    .venv/bin/python benchmarks/profile_consume.py --contender azk-iter-1 \\
        --topic bench-tp-100B-2000000-8 --records 2000000 --zookeeper H:P --bootstrap-server H:P
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RESULTS_DIR, md_table, say, this_python

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def short(frame: str) -> str:
    """``func (path/to/module.py:12)`` -> ``func (module.py)`` (line numbers merged)."""
    m = _FRAME.match(frame)
    if not m:
        return frame
    path = m.group("file")
    parts = Path(path).parts
    if "site-packages" in parts:
        path = "/".join(parts[parts.index("site-packages") + 1 :])
    elif "aiozkconsumer" in parts:
        path = "/".join(parts[parts.index("aiozkconsumer") :])
    else:
        path = Path(path).name
    return f"{m.group('func')} ({path})"


def summarise(raw: str, top: int) -> tuple[int, list[tuple[str, int]], list[tuple[str, int]]]:
    """Total samples, top self frames and top inclusive frames from py-spy's raw output."""
    self_c: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count_s = line.rpartition(" ")
        if not stack or not count_s.isdigit():
            continue
        count = int(count_s)
        frames = [short(f) for f in stack.split(";") if f and not f.startswith("process ")]
        frames = [f for f in frames if not f.startswith("thread (")]
        if not frames:
            continue
        total += count
        self_c[frames[-1]] += count
        for f in set(frames):
            incl[f] += count
    return total, self_c.most_common(top), incl.most_common(top)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--contender", default="azk-iter-1")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--zookeeper", required=True)
    parser.add_argument("--bootstrap-server", required=True)
    parser.add_argument("--rate", type=int, default=250, help="samples per second")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--native", action="store_true", help="include native (C) frames")
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    py_spy = shutil.which("py-spy") or str(Path(this_python()).with_name("py-spy"))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    raw_file = args.out_dir / f"profile-{args.contender}.raw"
    cmd = [
        py_spy,
        "record",
        "-r",
        str(args.rate),
        "-f",
        "raw",
        "-o",
        str(raw_file),
        *(["--native"] if args.native else []),
        "--",
        this_python(),
        str(Path(__file__).with_name("throughput.py")),
        "child",
        "--contender",
        args.contender,
        "--topic",
        args.topic,
        "--records",
        str(args.records),
        "--partitions",
        str(args.partitions),
        "--batch",
        str(args.batch),
        "--zookeeper",
        args.zookeeper,
        "--bootstrap-server",
        args.bootstrap_server,
    ]
    say(f"py-spy on {args.contender} ...")
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not raw_file.exists():
        raise SystemExit(f"py-spy failed: {done.stderr[-2000:]}")
    report = next(
        (ln for ln in reversed(done.stdout.splitlines()) if ln.startswith("{")), "(no report)"
    )
    total, self_top, incl_top = summarise(raw_file.read_text(), args.top)

    def rows(items: list[tuple[str, int]]) -> list[list[object]]:
        return [[f"{100 * n / total:.1f}%", f"`{name}`"] for name, n in items]

    text = "\n".join(
        [
            f"# Profile: {args.contender}",
            "",
            f"py-spy, {args.rate} Hz, {total} samples; child report: `{report}`",
            "",
            "## Self (top of stack)",
            "",
            md_table(["samples", "function"], rows(self_top)),
            "",
            "## Inclusive",
            "",
            md_table(["samples", "function"], rows(incl_top)),
            "",
        ]
    )
    out_file = args.out_dir / f"profile-{args.contender}.md"
    out_file.write_text(text)
    print(text)
    say(f"wrote {out_file} and {raw_file.name}")


if __name__ == "__main__":
    main()
