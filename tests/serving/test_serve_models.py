"""app/serving/models.py with a fake loader: which versions are loaded, served and reported."""

import os

import pytest

from app.serving.model_config import LATEST, VersionPolicy
from app.serving.models import ModelManager, list_versions, version_directories
from app.serving.rest_api import ServingError


class FakeVersion:
    def __init__(self, version, path):
        if os.path.exists(os.path.join(path, "broken")):
            raise OSError(f"{path} is broken")
        self.version, self.path = version, path

    def warm_up(self):
        pass


def make(base, *names):
    for name in names:
        os.makedirs(os.path.join(base, str(name)), exist_ok=True)


def poll(manager):
    """What the server's poller does, synchronously."""
    for version, path in manager.to_load():
        manager.start_loading(version)
        try:
            loaded = manager.load(version, path)
        except Exception as error:
            manager.failed(version, error)
        else:
            manager.publish(loaded)
    manager.unload_removed()


def states(manager):
    return [(s["version"], s["state"]) for s in manager.status_json()["model_version_status"]]


def test_only_integer_directories_are_versions(tmp_path):
    make(tmp_path, 1, 12, ".tmp-13-4242", "notes", "3a", "\u0663", 2**63)  # an Arabic-Indic 3; past int64
    (tmp_path / "7").write_text("a file, not a directory")
    assert list_versions(str(tmp_path)) == [1, 12]
    assert list_versions(str(tmp_path / "missing")) == []
    assert list_versions(str(tmp_path / "7")) == []  # a file as the base path


def test_a_version_is_loaded_from_its_directory_as_named(tmp_path):
    make(tmp_path, "007", "2", "002")
    assert version_directories(str(tmp_path)) == {2: "2", 7: "007"}
    manager = ModelManager("translator", str(tmp_path), loader=FakeVersion)
    poll(manager)
    assert manager.get().version == 7 and manager.get().path == os.path.join(str(tmp_path), "007")


def test_the_newest_version_is_served_and_replaces_the_old_one(tmp_path):
    manager = ModelManager("translator", str(tmp_path), loader=FakeVersion)
    with pytest.raises(ServingError, match="Could not find any versions of model translator") as error:
        manager.status_json()
    assert error.value.status == 404
    make(tmp_path, 1, 2)
    poll(manager)
    assert manager.get().version == 2 and states(manager) == [("2", "AVAILABLE")]  # 1 is never loaded
    make(tmp_path, ".tmp-3-1")
    poll(manager)
    assert states(manager) == [("2", "AVAILABLE")]
    os.rename(tmp_path / ".tmp-3-1", tmp_path / "3")
    poll(manager)
    assert manager.get().version == 3 and states(manager) == [("3", "AVAILABLE"), ("2", "END")]
    with pytest.raises(ServingError, match=r"Servable not found for request: Specific\(translator, 2\)"):
        manager.get(2)
    with pytest.raises(ServingError, match="Could not find version 5 of model translator"):
        manager.status_json(5)


def test_num_versions_keeps_older_versions_addressable(tmp_path):
    manager = ModelManager("translator", str(tmp_path), VersionPolicy(LATEST, 2), loader=FakeVersion)
    make(tmp_path, 1, 2)
    poll(manager)
    assert sorted(manager.loaded) == [1, 2] and manager.get().version == 2 and manager.get(1).version == 1
    make(tmp_path, 3)
    poll(manager)
    assert sorted(manager.loaded) == [2, 3]
    assert states(manager) == [("3", "AVAILABLE"), ("2", "AVAILABLE"), ("1", "END")]


def test_a_broken_version_is_reported_and_the_last_good_one_stays_served(tmp_path):
    manager = ModelManager(
        "translator", str(tmp_path), max_num_load_retries=2, loader=FakeVersion, load_retry_interval_seconds=0
    )
    make(tmp_path, 1)
    poll(manager)
    make(tmp_path, "2/broken")
    for _ in range(5):
        poll(manager)
    assert manager.get().version == 1
    status = manager.status_json(2)["model_version_status"][0]
    assert status["state"] == "END" and status["status"]["error_code"] == "UNKNOWN"
    assert "is broken" in status["status"]["error_message"]
    assert manager.status[2].failed_loads == 3  # the first try and two retries, then no more


def test_a_failed_version_is_retried_a_retry_interval_later_and_forgotten_once_gone(tmp_path):
    clock = [100.0]
    manager = ModelManager(
        "translator", str(tmp_path), max_num_load_retries=1, loader=FakeVersion,
        load_retry_interval_seconds=60, clock=lambda: clock[0],
    )
    make(tmp_path, "2/broken")  # a version still being copied, say
    poll(manager)
    clock[0] += 59
    poll(manager)
    assert manager.status[2].failed_loads == 1  # not tried again within the minute
    os.rmdir(tmp_path / "2" / "broken")  # the copy completes
    clock[0] += 1
    poll(manager)
    assert manager.get().version == 2
    make(tmp_path, "3/broken")
    for _ in range(3):
        poll(manager)
        clock[0] += 60
    assert manager.status[3].failed_loads == 2  # the first try and one retry, then no more
    os.rmdir(tmp_path / "3" / "broken")
    poll(manager)
    assert manager.get().version == 2  # retries are spent
    os.rmdir(tmp_path / "3")
    poll(manager)  # gone: its failures are forgotten
    make(tmp_path, 3)
    poll(manager)
    assert manager.get().version == 3


def test_a_missing_base_path_is_logged_once_and_what_is_loaded_stays_served(tmp_path, caplog):
    base = tmp_path / "translator"
    make(base, 1)
    manager = ModelManager("translator", str(base), loader=FakeVersion)
    poll(manager)
    (tmp_path / "moved").mkdir()
    os.rename(base / "1", tmp_path / "moved" / "1")
    os.rmdir(base)
    with caplog.at_level("INFO", logger="app.serve"):
        poll(manager)
        poll(manager)
        base.write_text("a file now")
        poll(manager)
        base.unlink()
        os.rename(tmp_path / "moved", base)
        poll(manager)
    assert [r.getMessage() for r in caplog.records] == [
        f"the base path {base} of model translator does not exist; serving what is loaded",
        f"the base path {base} of model translator is not a directory; serving what is loaded",
        f"the base path {base} of model translator is back",
    ]
    assert manager.get().version == 1


def test_a_deleted_newest_version_gives_way_to_the_one_before(tmp_path):
    manager = ModelManager("translator", str(tmp_path), loader=FakeVersion)
    make(tmp_path, 1)
    poll(manager)
    make(tmp_path, 2)
    poll(manager)
    os.rmdir(tmp_path / "2")
    poll(manager)  # 1 is loaded again before 2 goes
    assert manager.get().version == 1 and states(manager) == [("2", "END"), ("1", "AVAILABLE")]
