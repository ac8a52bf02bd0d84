"""The scale benchmark's plots: one PNG per curve (matplotlib, the ``bench`` extra), drawn
from the points of ``scale.json`` so that they can be redrawn from a result file
(``scale.py plot benchmarks/results/scale.json``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def _log_x(ax: Any, xs: Sequence[int]) -> None:
    if len(set(xs)) > 1 and max(xs) / max(min(xs), 1) >= 10:
        ax.set_xscale("log")
    ax.set_xticks(sorted(set(xs)))
    ax.set_xticklabels([f"{x:,}" for x in sorted(set(xs))])
    ax.grid(True, alpha=0.3)


def _series(points: Sequence[Mapping[str, Any]], key: str, value: Any) -> list[Mapping[str, Any]]:
    """The measured points whose ``key`` is ``value``, by partitions: one line of a plot."""
    return sorted(
        (p for p in points if p[key] == value and p.get("ok")), key=lambda p: p["partitions"]
    )


def _save(plt: Any, fig: Any, path: Path, title: str | None = None) -> Path:
    """Lay ``fig`` out (under ``title``, if any), write it to ``path`` and close it."""
    if title is not None:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_rebalance(points: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """One panel per mode: p50 (solid) and p99 (dashed) against partitions, a line per
    member count."""
    plt = _pyplot()
    modes = list(dict.fromkeys(p["mode"] for p in points))
    fig, axes = plt.subplots(1, len(modes), figsize=(5 * len(modes), 4), squeeze=False)
    for ax, mode in zip(axes[0], modes, strict=True):
        mine = [p for p in points if p["mode"] == mode and p["ok"]]
        for members in sorted({p["members"] for p in mine}):
            row = _series(mine, "members", members)
            xs = [p["partitions"] for p in row]
            (line,) = ax.plot(xs, [p["p50_ms"] for p in row], "o-", label=f"{members} members p50")
            ax.plot(
                xs,
                [p["p99_ms"] for p in row],
                "s--",
                color=line.get_color(),
                label=f"{members} members p99",
            )
        _log_x(ax, [p["partitions"] for p in points])
        ax.set_title(mode)
        ax.set_xlabel("partitions")
        ax.set_ylabel("rebalance latency, ms")
        ax.legend(fontsize="small")
    return _save(plt, fig, path, "Rebalance after a join or leave: p50 (solid), p99 (dashed)")


def plot_idle(points: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """Two panels: idle CPU (% of a core) and RSS (MiB) against owned partitions, a line per
    client."""
    plt = _pyplot()
    fig, (cpu_ax, rss_ax) = plt.subplots(1, 2, figsize=(10, 4))
    for client in dict.fromkeys(p["client"] for p in points):
        row = _series(points, "client", client)
        xs = [p["partitions"] for p in row]
        cpu_ax.plot(xs, [p["cpu_pct"] for p in row], "o-", label=client)
        rss_ax.plot(xs, [p["rss_mib"] for p in row], "o-", label=client)
    for ax, label in ((cpu_ax, "idle CPU, % of one core"), (rss_ax, "RSS, MiB")):
        _log_x(ax, [p["partitions"] for p in points])
        ax.set_xlabel("owned partitions (no traffic)")
        ax.set_ylabel(label)
        ax.legend(fontsize="small")
    return _save(plt, fig, path, "One idle member: CPU and RSS against owned partitions")


def plot_throughput(points: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """Steady records/s of 1 KiB records against partitions, a line per contender."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for contender in dict.fromkeys(p["contender"] for p in points):
        row = _series(points, "contender", contender)
        ax.plot(
            [p["partitions"] for p in row],
            [p["steady_records_per_s"] for p in row],
            "o-",
            label=contender,
        )
    _log_x(ax, [p["partitions"] for p in points])
    ax.set_xlabel("partitions")
    ax.set_ylabel("steady records/s (1 KiB)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="small")
    ax.set_title("Throughput against partitions, steady state")
    return _save(plt, fig, path)


def plot_all(data: Mapping[str, Any], out_dir: Path, name: str) -> list[Path]:
    """A PNG per curve in ``data["curves"]`` that has points: ``<name>-<curve>.png``."""
    drawers = {"rebalance": plot_rebalance, "idle": plot_idle, "throughput": plot_throughput}
    written = []
    for curve, points in data.get("curves", {}).items():
        if points and curve in drawers:
            written.append(drawers[curve](points, out_dir / f"{name}-{curve}.png"))
    return written
