"""Run inside the kai-ray image by tests/image/test_image.py (as the image's user, with its venv
Python); prints one JSON object of what it finds. Standard library only: it runs in the image.

Why a script and not many `buildah run ... sh -c` calls: one process sees everything the test
asserts (ids, write permissions, which Pythons can import pip, what is on the filesystem) with
one start of the container, and the test asserts on plain data.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

VENV = "/opt/kai-ray"
#: Not part of the image: kernel filesystems and what the test mounts in.
SKIP = ("/proc", "/sys", "/dev", "/examples", "/probe.py", "/run", "/etc/hosts", "/etc/resolv.conf")
FORBIDDEN = ("pip", "setuptools")


def walk(top: str) -> Iterator[str]:
    """Every path under top (not following symlinks), minus SKIP; unreadable directories are passed."""
    for directory, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if not os.path.join(directory, d).startswith(SKIP)]
        for name in dirs + files:
            yield os.path.join(directory, name)


def venv_write_error() -> str:
    """What writing a new file into the venv's bin/ fails with (or "" if it does not fail)."""
    try:
        with open(f"{VENV}/bin/kai-ray-written-by-probe", "w"):
            return ""
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc))


def importable() -> dict[str, list[str]]:
    """For the venv's Python and the base Python it was made from: which of FORBIDDEN it imports."""
    found: dict[str, list[str]] = {}
    mine = [m for m in FORBIDDEN if importlib.util.find_spec(m) is not None]
    if mine:
        found[sys.executable] = mine
    base = os.path.join(sys.base_prefix, "bin", "python3")
    check = f"import importlib.util as u; print(','.join(m for m in {FORBIDDEN!r} if u.find_spec(m)))"
    out = subprocess.run([base, "-c", check], capture_output=True, text=True, check=True).stdout.strip()
    if out:
        found[base] = out.split(",")
    return found


def installed(paths: list[str]) -> list[str]:
    """Installed copies of FORBIDDEN: their package directories or .dist-info/.egg-info metadata."""
    hits = []
    for path in paths:
        parent, name = os.path.split(path)
        in_site = parent.endswith(("site-packages", "dist-packages"))
        if in_site and (name in FORBIDDEN or name.startswith(tuple(f"{m}-" for m in FORBIDDEN))):
            hits.append(path)
    return hits


def sources(paths: list[str]) -> list[str]:
    """What only a build leaves: the builder's /src and /wheels, kai-ray's pyproject.toml, its wheel,
    or anything named kai_ray/kai-ray but the venv, its contents and the user's home."""
    site = f"{VENV}/lib/"
    hits = [p for p in ("/src", "/wheels") if os.path.lexists(p)]
    for path in paths:
        name = os.path.basename(path)
        mine = path in (VENV, "/home/kai-ray") or path.startswith((site, f"{VENV}/bin/"))
        stray_kai_ray = name.startswith(("kai_ray", "kai-ray")) and not mine
        project_file = name == "pyproject.toml" and '"kai-ray"' in Path(path).read_text(errors="replace")
        if stray_kai_ray or project_file:
            hits.append(path)
    return hits


def main() -> None:
    venv = list(walk(VENV))
    everything = list(walk("/"))
    spec = importlib.util.find_spec("kai_ray")
    report = {
        "uid": os.getuid(),
        "gid": os.getgid(),
        "groups": sorted(os.getgroups()),
        "executable": sys.executable,
        "kai_ray": spec.origin if spec and spec.origin else "",
        "writable": [p for p in [VENV, *venv] if not os.path.islink(p) and os.access(p, os.W_OK)],
        "not_root_owned": [p for p in [VENV, *venv] if (os.lstat(p).st_uid, os.lstat(p).st_gid) != (0, 0)],
        "write_error": venv_write_error(),
        "importable": importable(),
        "on_path": {n: w for n in ("pip", "pip3", "easy_install") if (w := shutil.which(n))},
        "installed": installed(everything),
        "sources": sources(everything),
        "home": str(Path.home()),
    }
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main()
