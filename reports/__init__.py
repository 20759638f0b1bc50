"""Reports: tables, figures and HTML/Markdown rendering of stored results.

Reports compute nothing new and import only result and record types, so a report renders
from stored results without torch.
"""
