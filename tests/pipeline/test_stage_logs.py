"""Stage logs: removed after a clean run, kept (and named) after a crash or when asked."""

import logging
import tempfile

from voxrelay.pipeline.stage_process import StageLogs


def test_a_clean_run_removes_its_private_log_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # what $TMPDIR sets
    monkeypatch.delenv("VOXRELAY_LOG_DIR", raising=False)
    logs, other = StageLogs(), StageLogs()
    path = logs.path("asr")
    open(path, "w").close()
    other.path("asr")
    assert logs.directory != other.directory  # two supervisors in one process do not share
    assert logs.directory.startswith(str(tmp_path / "voxrelay-"))
    logs.finish(crashed=False)
    assert not (tmp_path / logs.directory).exists()
    assert (tmp_path / other.directory).exists()


def test_a_crash_keeps_the_logs_and_says_where(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # what $TMPDIR sets
    monkeypatch.delenv("VOXRELAY_LOG_DIR", raising=False)
    logs = StageLogs()
    logs.path("tts")
    with caplog.at_level(logging.WARNING):
        logs.finish(crashed=True)
    assert (tmp_path / logs.directory / "tts.log").parent.exists()
    assert logs.directory in caplog.text


def test_a_named_log_dir_is_always_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("VOXRELAY_LOG_DIR", str(tmp_path / "mine"))
    logs = StageLogs()
    assert logs.path("llm") == str(tmp_path / "mine" / "llm.log")
    logs.finish(crashed=False)
    assert (tmp_path / "mine").is_dir()
