"""A server whose base path holds no version yet says what to do, in TF Serving's answers."""

import os

from app.serving.models import ModelManager, no_export_yet
from app.serving.rest_api import ServingError
from tests.serving.server_process import Server
from tests.serving.test_serve_models import FakeVersion, make, poll


def test_the_hint_names_the_base_path_and_its_flag_unless_it_is_the_default():
    assert no_export_yet(os.path.join("saved_models", "translator")) == (
        "no model exported under saved_models/translator yet: run python export.py"
    )
    assert no_export_yet("/srv/en-de") == (
        "no model exported under /srv/en-de yet: run python export.py --model-base-path /srv/en-de"
    )


def error_of(call):
    try:
        call()
    except ServingError as error:
        return error.status, error.message
    raise AssertionError("no ServingError")


def test_the_hint_is_added_only_while_the_base_path_holds_no_version(tmp_path):
    base = str(tmp_path / "en-de")
    manager = ModelManager("en-de", base, loader=FakeVersion)
    poll(manager)
    hint = f": no model exported under {base} yet: run python export.py --model-base-path {base}"
    assert error_of(manager.get) == (404, "Servable not found for request: Latest(en-de)" + hint)
    assert error_of(lambda: manager.get(3)) == (404, "Servable not found for request: Specific(en-de, 3)" + hint)
    assert error_of(manager.status_json) == (404, "Could not find any versions of model en-de" + hint)
    # A version there that fails to load: TF Serving's words alone, and its status says why.
    make(base, 1)
    open(os.path.join(base, "1", "broken"), "w").close()
    poll(manager)
    assert error_of(manager.get) == (404, "Servable not found for request: Latest(en-de)")
    assert manager.status_json()["model_version_status"][0]["state"] == "END"


def test_the_server_and_its_rest_answers_say_no_model_was_exported_yet(tmp_path):
    base = str(tmp_path / "translator")
    server = Server(base, log_path=tmp_path / "serve.log")
    try:
        hint = f": no model exported under {base} yet: run python export.py --model-base-path {base}"
        assert server.request("GET", "/v1/models/translator") == (
            404, {"error": "Could not find any versions of model translator" + hint}
        )
        assert server.request("GET", "/v1/models/translator/metadata") == (
            404, {"error": "Servable not found for request: Latest(translator)" + hint}
        )
        assert server.predict({"instances": ["A man."]}) == (
            404, {"error": "Servable not found for request: Latest(translator)" + hint}
        )
        # Another model's name is not this base path's business: TF Serving's answer alone.
        assert server.predict({"instances": ["A man."]}, "/v1/models/nope:predict") == (
            404, {"error": "Servable not found for request: Latest(nope)"}
        )
    finally:
        server.stop()
    log = (tmp_path / "serve.log").read_text()
    assert f"WARNING no model exported under {base} yet: run python export.py --model-base-path {base} " in log
