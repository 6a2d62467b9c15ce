"""Render deploy/grafana/invoice-pipeline.json's panels to a PNG from a real Prometheus, with
matplotlib (there is no Grafana server here): each panel's expressions over a time range, as
Grafana would query them (`query_range`), titled and laid out like the dashboard.

    .venv/bin/python deploy/grafana/render_png.py http://127.0.0.1:9090 --minutes 10 --out docs/images/dashboard.png
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
import urllib.parse
import urllib.request
from datetime import datetime
from pathlib import Path

DASHBOARD = Path(__file__).with_name("invoice-pipeline.json")


def query_range(prometheus: str, expr: str, start: float, end: float, step: float) -> list[dict[str, object]]:
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{prometheus}/api/v1/query_range?{params}", timeout=30) as response:
        return list(json.load(response)["data"]["result"])


def legend(template: str, labels: dict[str, str]) -> str:
    """Grafana's legend: {{label}} replaced by its value (a label Prometheus dropped is empty)."""
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template).strip()


def with_gaps(points: list[tuple[float, str]], step: float) -> tuple[list[datetime], list[float]]:
    """The series' points, with a break where samples are missing (as Grafana draws it)."""
    xs: list[datetime] = []
    ys: list[float] = []
    previous: float | None = None
    for t, v in points:
        if previous is not None and float(t) - previous > 2 * step:
            xs.append(datetime.fromtimestamp(previous + step))
            ys.append(math.nan)
        xs.append(datetime.fromtimestamp(float(t)))
        ys.append(float(v))
        previous = float(t)
    return xs, ys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prometheus")
    parser.add_argument("--minutes", type=float, default=15)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    panels = json.loads(DASHBOARD.read_text())["panels"]
    end = time.time()
    start = end - args.minutes * 60
    step = max(args.minutes * 60 / 200, 1)
    cols = 3
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 5.5, rows * 2.8), squeeze=False)
    for ax, panel in zip(axes.flat, panels, strict=False):
        ax.set_title(panel["title"], fontsize=9)
        for target in panel["targets"]:
            for series in query_range(args.prometheus, target["expr"], start, end, step):
                xs, ys = with_gaps(series["values"], step)  # type: ignore[arg-type]
                ax.plot(xs, ys, label=legend(target.get("legendFormat", ""), series["metric"]))  # type: ignore[arg-type]
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6, loc="upper left")
        ax.tick_params(labelsize=7)
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M"))
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.suptitle(
        "invoice-pipeline (deploy/grafana/invoice-pipeline.json, rendered from Prometheus)", fontsize=11
    )
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=90)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
