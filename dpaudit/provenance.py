"""Provenance: what produced a record or result (package versions, git revision, time, host).

Attached to every record and run so that an audit can be traced back to the exact code and
library versions that trained and attacked the model.
"""

from __future__ import annotations

import functools
import importlib.metadata
import platform
import subprocess
import time
from pathlib import Path

__all__ = ["provenance", "package_versions", "git_revision"]

_PACKAGES = ("dpaudit", "torch", "torchvision", "numpy", "scipy", "scikit-learn", "dp-accounting", "safetensors")


def package_versions() -> dict[str, str]:
    """Installed versions of the packages results depend on (``"absent"`` if not installed)."""
    out = {}
    for name in _PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


@functools.lru_cache(maxsize=1)
def git_revision() -> str:
    """The git commit of the source tree the package runs from, with ``+dirty`` when modified."""
    here = Path(__file__).resolve().parent
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        if rev.returncode != 0:
            return "unknown"
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def provenance(**extra: object) -> dict[str, object]:
    """A provenance block: versions, git revision, UTC time, Python and platform, plus ``extra``."""
    return {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git_revision": git_revision(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": package_versions(),
        **extra,
    }
