"""Render docs/evaluating.md's picture of the Dagster asset graph (``docs/asset_graph.png``) from the real Definitions.

    PYTHONPATH=. .venv/bin/python docs/render_asset_graph.py

Layers by dependency depth, one colour per asset group, each box naming its partitioning.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from rag_pipeline.definitions import defs

COLOURS = {"knowledge_base": "#dbeafe", "retrieval_evaluation": "#dcfce7", "strategy_analysis": "#fef3c7"}


def _partition_label(spec) -> str:
    pdef = spec.partitions_def
    if pdef is None:
        return "unpartitioned"
    if type(pdef).__name__ == "MultiPartitionsDefinition":
        return "partition: dataset|strategy"
    name = getattr(pdef, "name", None) or "?"
    observed = ", observed" if spec.key.to_user_string() == "dataset_knowledge_base" else ""
    return f"partition: {name.replace('_', ' ')}{observed}"


def render(out: Path) -> None:
    specs = {s.key.to_user_string(): s for s in defs.resolve_all_asset_specs()}
    deps = {k: [d.asset_key.to_user_string() for d in s.deps] for k, s in specs.items()}
    depth: dict[str, int] = {}

    def level(key: str) -> int:
        if key not in depth:
            depth[key] = 1 + max((level(d) for d in deps[key]), default=-1)
        return depth[key]

    width, height = 2.5, 1.15
    # the evaluation chain on one row, the knowledge-base lineage below it, the analyses to the right
    pos = {key: (level(key) * 2.75, 0.0) for key in specs}
    for key in ("knowledge_base", "dataset_knowledge_base"):
        pos[key] = (pos[key][0] - 2.75, -1.5)
    pos["evaluation_dataset"] = (pos["dataset_knowledge_base"][0], 0.0)
    analyses = sorted(k for k, s in specs.items() if s.group_name == "strategy_analysis")
    for i, key in enumerate(analyses):
        pos[key] = (pos[key][0], 0.7 - 1.4 * i)
    fig, ax = plt.subplots(figsize=(13, 4.0), dpi=72)
    for key, (x, y) in pos.items():
        spec = specs[key]
        ax.add_patch(FancyBboxPatch((x - width / 2, y - height / 2 + 0.2), width, height - 0.4,
                                    boxstyle="round,pad=0.05", fc=COLOURS.get(spec.group_name, "#eee"), ec="#555"))
        ax.text(x, y + 0.08, key, ha="center", va="center", fontsize=8.5, weight="bold")
        ax.text(x, y - 0.17, _partition_label(spec), ha="center", va="center", fontsize=7.5, color="#333")
    for key, parents in deps.items():
        for parent in parents:
            (x0, y0), (x1, y1) = pos[parent], pos[key]
            if y1 - y0 > 1:  # up from the lineage row: into the bottom of the box
                start, end, style = (x0 + width / 2 + 0.05, y0), (x1 - 0.3, y1 - height / 2 + 0.15), "arc3,rad=0.15"
            else:
                start, end, style = (x0 + width / 2 + 0.05, y0), (x1 - width / 2 - 0.05, y1), "arc3,rad=0"
            ax.add_patch(FancyArrowPatch(start, end, connectionstyle=style, arrowstyle="-|>", mutation_scale=10,
                                         color="#666", lw=0.9))
    for i, (group, colour) in enumerate(COLOURS.items()):
        ax.add_patch(FancyBboxPatch((i * 3.1 + 5, -2.55), 0.3, 0.2, boxstyle="square,pad=0", fc=colour, ec="#555"))
        ax.text(i * 3.1 + 5.4, -2.45, f"group {group}", fontsize=8, va="center")
    xs = [p[0] for p in pos.values()]
    ys = [p[1] for p in pos.values()]
    ax.set_xlim(min(xs) - 1.3, max(xs) + 1.3)
    ax.set_ylim(min(min(ys) - 0.8, -2.7), max(ys) + 0.8)
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(out, dpi=72)
    plt.close(fig)
    from PIL import Image  # noqa: PLC0415 - matplotlib's own dependency; 64 colours keep the file small

    Image.open(out).convert("RGB").quantize(colors=64).save(out, optimize=True)


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("asset_graph.png")
    render(target)
    print(f"{target} ({target.stat().st_size} bytes)")
