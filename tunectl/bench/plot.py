"""`--plot FILE.png`: the chart as an image, through matplotlib (the optional extra tunectl[plot])."""

from __future__ import annotations

from tunectl.bench.results import Summary
from tunectl.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tunectl.system.trust import PendingWrite


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError("--plot needs matplotlib, which is not installed",
                         hint="pip install 'tunectl[plot]' (or apt install python3-matplotlib), or use --csv FILE") from None


def write_png(pending: PendingWrite, summaries: list[Summary], title: str) -> None:
    """The chart into an output made ready by `export.prepare_output`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    try:
        schedulers: list[str | None] = []
        for s in summaries:
            if s.scheduler not in schedulers:
                schedulers.append(s.scheduler)
        for sched in schedulers:
            pts = sorted((s for s in summaries if s.scheduler == sched), key=lambda s: s.read_ahead_kb)
            xs = [max(s.read_ahead_kb, 1) for s in pts]
            ax.errorbar(xs, [s.mb_s for s in pts],
                        yerr=[[s.mb_s - s.mb_s_min for s in pts], [s.mb_s_max - s.mb_s for s in pts]],
                        marker="o", capsize=3, label=sched or "no scheduler")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("read_ahead_kb (KiB)")
        ax.set_ylabel("MB/s (median of runs; bars: min..max)")
        ax.set_ylim(bottom=0)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend()
        import io

        from tunectl.bench.export import fill_output

        image = io.BytesIO()
        fig.savefig(image, format="png", dpi=100)
        problem = fill_output(pending, image.getvalue())
        if problem:
            raise UsageError(problem)
    finally:
        plt.close(fig)
