"""The notebook of a percent-format script (`# %%` starts a code cell, `# %% [markdown]` a
markdown cell whose lines are `# ` comments), so the `.ipynb` is never edited by hand and the
script is what the tests run:

    python python/examples/notebook.py            # rewrites every examples/*.ipynb
"""

import json
import sys
from pathlib import Path
from typing import List, Tuple


def cells_of(script: str) -> List[Tuple[str, str]]:
    """(cell_type, source) of each cell; what precedes the first `# %%` is not a cell."""
    cells: List[Tuple[str, List[str]]] = []
    for line in script.splitlines():
        if line.startswith("# %%"):
            cells.append(("markdown" if "[markdown]" in line else "code", []))
        elif cells:
            kind, lines = cells[-1]
            if kind == "markdown":
                line = line[2:] if line.startswith("# ") else line.lstrip("#")
            lines.append(line)
    return [(kind, "\n".join(lines).strip("\n")) for kind, lines in cells]


def notebook_of(script: str) -> dict:
    cells = []
    for i, (kind, source) in enumerate(cells_of(script)):
        lines = source.splitlines(keepends=True)
        cell = {"cell_type": kind, "id": f"cell-{i}", "metadata": {}, "source": lines}
        if kind == "code":
            cell.update(execution_count=None, outputs=[])
        cells.append(cell)
    return {
        "cells": cells,
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    for script in sorted(here.glob("*.py")):
        if script.name == Path(__file__).name:
            continue
        out = script.with_suffix(".ipynb")
        out.write_text(json.dumps(notebook_of(script.read_text()), indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {out}", file=sys.stderr)
