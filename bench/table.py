"""Printing a benchmark's results as a Markdown table."""

from __future__ import annotations


def print_table(header: list[str], rows: list[list[str]]) -> None:
    """Left-aligned header, right-aligned cells, column widths to fit."""
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print("| " + " | ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) + " |")
