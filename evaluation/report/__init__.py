"""The eval report: ``write_report(out_dir, results, items)`` writes one self-contained ``report.html``."""

from evaluation.report.html import render, write_report

__all__ = ["render", "write_report"]
