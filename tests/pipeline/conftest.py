import os

import pytest

from tests.pipeline.pipeline_thread import PipelineThread
from tests.pipeline.serve_process import ServeProcess
from voxrelay.pipeline.audio_io import read_clip
from voxrelay.pipeline.config import PipelineConfig


@pytest.fixture(scope="session")
def serve_process(clips_dir, tmp_path_factory):
    """One real `voxrelay serve` (three stage processes) shared by the tests that talk to
    a server from outside: metrics, fuzzing. Stopping it must exit 0."""
    server = ServeProcess(tmp_path_factory.mktemp("serve"))
    yield server
    code = server.stop()
    assert code == 0, server.log_tail()


@pytest.fixture(scope="session")
def shared_pipeline(clips_dir):
    """One real Pipeline on a background loop for the reliability and soak modules, warmed
    by one turn, with a warm standby per stage (as `voxrelay serve` runs). Short replies:
    those tests are about turns, not decode speed."""
    config = PipelineConfig(
        heartbeat_timeout_s=1.0,
        max_restarts=50,
        warm_standby=True,
        llm={"max_new_tokens": 16},
    )
    thread = PipelineThread(config)
    warm = thread.call(thread.pipeline.run_clip(read_clip(clips_dir / "cards/005.wav")))
    assert not warm.errors, warm.errors
    yield thread
    supervisor = thread.pipeline.supervisor
    thread.stop()
    if supervisor.crashed:  # stages were killed: the logs stay, and the supervisor said where
        assert sorted(os.listdir(supervisor.log_dir)) == ["asr.log", "llm.log", "tts.log"]
    else:  # a clean stop removes them
        assert not os.path.exists(supervisor.log_dir)
