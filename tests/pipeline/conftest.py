import pytest

from tests.pipeline.serve_process import ServeProcess


@pytest.fixture(scope="session")
def serve_process(clips_dir, tmp_path_factory):
    """One real `voxrelay serve` (three stage processes) shared by the tests that talk to
    a server from outside: metrics, fuzzing. Stopping it must exit 0."""
    server = ServeProcess(tmp_path_factory.mktemp("serve"))
    yield server
    code = server.stop()
    assert code == 0, server.log_tail()
