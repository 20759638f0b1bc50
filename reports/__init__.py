"""Reports: tables, figures and HTML/Markdown rendering of stored results.

Reports compute nothing new and import only result and record types, so a report renders
from stored results without torch. Each report module registers its kind (what it loads from a
run directory and how it renders a page) in :data:`reports.kinds.REPORT_KINDS`, which
``dpaudit report`` iterates.
"""
