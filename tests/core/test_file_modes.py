"""Results and reports follow the user's umask (atomic writes used to leave them 0600)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_atomic_writes_follow_umask(tmp_path, umask, mode):
    # The umask is read once at import, so each setting runs in a fresh interpreter.
    code = (
        "import os, sys, numpy as np\n"
        f"os.umask({umask})\n"
        "from dpaudit.store import atomic_save_npz, atomic_write_json, atomic_write_text\n"
        "d = sys.argv[1]\n"
        "atomic_write_json(os.path.join(d, 'a.json'), {'x': 1})\n"
        "atomic_write_text(os.path.join(d, 'b.html'), '<p>')\n"
        "atomic_save_npz(os.path.join(d, 'c.npz'), x=np.arange(3))\n"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True)
    for name in ("a.json", "b.html", "c.npz"):
        assert os.stat(tmp_path / name).st_mode & 0o777 == mode, name
