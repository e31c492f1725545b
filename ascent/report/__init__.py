"""The run report: one self-contained HTML page of a run's metric curves and rollout samples (`ascent view`)."""

from ascent.report.html import REPORT_FILE, write_report, write_report_or_warn
from ascent.report.serve import serve

__all__ = ["REPORT_FILE", "serve", "write_report", "write_report_or_warn"]
