"""Print a deb-src line for SUITE from this machine's own apt configuration.

The Debian archive URI is read from the configured sources (deb822 `*.sources` files and
one-line `*.list` files, where apt looks for them), so the project names no mirror host and
works behind whatever mirror a machine uses. Usage: debian_source.py SUITE [COMPONENT]
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path


def _apt_dirs() -> tuple[Path, Path]:
    """The sources.list file and sources.list.d folder apt itself uses."""
    try:
        out = subprocess.run(
            [
                "apt-config",
                "shell",
                "DIR",
                "Dir",
                "ETC",
                "Dir::Etc",
                "LIST",
                "Dir::Etc::sourcelist",
                "PARTS",
                "Dir::Etc::sourceparts",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        vals = dict(re.findall(r"^(\w+)='(.*)'$", out, re.M))
        etc = Path("/", vals.get("DIR", "/"), vals.get("ETC", "etc/apt"))
        return etc / vals.get("LIST", "sources.list"), etc / vals.get("PARTS", "sources.list.d")
    except (OSError, subprocess.CalledProcessError):
        return Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d")


def _entries(list_file: Path, parts: Path) -> list[tuple[str, list[str]]]:
    """(uri, suites) of every `deb` source configured."""
    found: list[tuple[str, list[str]]] = []
    files = [list_file, *sorted(parts.glob("*.list"))] if parts.is_dir() else [list_file]
    for f in files:
        if not f.is_file():
            continue
        for line in f.read_text(errors="replace").splitlines():
            words = line.split("#", 1)[0].split()
            if len(words) >= 3 and words[0] == "deb":
                rest = [w for w in words[1:] if not w.startswith("[")]
                if len(rest) >= 2:
                    found.append((rest[0], [rest[1]]))
    for f in sorted(parts.glob("*.sources")) if parts.is_dir() else []:
        for stanza in re.split(r"\n\s*\n", f.read_text(errors="replace")):
            fields = dict(
                (k.strip().lower(), v.strip())
                for k, _, v in (
                    ln.partition(":") for ln in stanza.splitlines() if not ln.startswith("#")
                )
                if v
            )
            if "deb" in fields.get("types", "").split() and fields.get("enabled", "yes") != "no":
                for uri in fields.get("uris", "").split():
                    found.append((uri, fields.get("suites", "").split()))
    return found


def _codename() -> str:
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return ""
    m = re.search(r"^VERSION_CODENAME=\"?([a-z]+)", text, re.M)
    return m.group(1) if m else ""


def archive_uri() -> str:
    """The URI of the configured main Debian archive: the source of this release's own suite
    (not its security suite, nor a third-party repository)."""
    codename = _codename()
    entries = [(uri, suites) for uri, suites in _entries(*_apt_dirs()) if "security" not in uri]
    mine = [uri for uri, suites in entries if codename and codename in suites]
    if mine:
        return mine[0]
    for uri, _ in entries:  # no codename to go by: the first archive that looks like Debian's
        if uri.rstrip("/").endswith("/debian"):
            return uri
    raise SystemExit("no Debian archive found in the apt sources of this machine")


if __name__ == "__main__":
    suite = sys.argv[1] if len(sys.argv) > 1 else "trixie"
    component = sys.argv[2] if len(sys.argv) > 2 else "main"
    print(f"deb-src {archive_uri()} {suite} {component}")
