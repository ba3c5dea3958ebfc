"""What the server serves: TF Serving's model config file, or the one model of its flags.

    models = read_model_config("serving/models.config")      # tuple of ServedModel
    models = (ServedModel.from_flags("translator", "saved_models/translator"),)

The file is the text-format `ModelServerConfig` that `tensorflow_model_server
--model_config_file` reads, parsed with TF Serving's own proto:

    model_config_list {
      config {
        name: "en-de"
        base_path: "/models/en-de"
        model_platform: "tensorflow"
        model_version_policy { specific { versions: 3 versions: 4 } }
        version_labels { key: "stable" value: 3 }
        version_labels { key: "canary" value: 4 }
      }
    }

A file that does not parse, or that this server cannot serve as written (a missing base
path, two models of one name, another platform), is a `ModelConfigError` naming the file,
the line and the field; the server then keeps the config it had.
"""

import dataclasses
import os
import re

from google.protobuf import text_format

from app.cli.flag_types import MODEL_NAME
from app.serving.protos import config as config_protos

LATEST, ALL, SPECIFIC = "latest", "all", "specific"


class ModelConfigError(ValueError):
    """A model config that cannot be served; the message names the file, line and field."""


@dataclasses.dataclass(frozen=True)
class VersionPolicy:
    """Which versions under a base path are served (`model_version_policy`)."""

    kind: str = LATEST
    num_versions: int = 1  # LATEST: how many of the newest
    versions: tuple = ()  # SPECIFIC: these, where they are on disk

    def aspired(self, on_disk):
        """The versions to serve among `on_disk` (ascending integers), ascending."""
        if self.kind == LATEST:
            return list(on_disk)[-self.num_versions:]
        if self.kind == ALL:
            return list(on_disk)
        return [version for version in on_disk if version in self.versions]

    def describe(self):
        if self.kind == LATEST:
            return f"latest {self.num_versions}"
        if self.kind == ALL:
            return "all"
        return "specific " + ", ".join(str(v) for v in self.versions)


@dataclasses.dataclass(frozen=True)
class ServedModel:
    """One `config { ... }` entry: a name, its base path, its policy and its labels."""

    name: str
    base_path: str
    policy: VersionPolicy = VersionPolicy()
    labels: tuple = ()  # ((label, version), ...), sorted by label

    @classmethod
    def from_flags(cls, name, base_path, num_versions=1):
        """The model of --model_name and --model_base_path, as TF Serving builds it."""
        return cls(name, base_path, VersionPolicy(LATEST, num_versions))

    @property
    def label_map(self):
        return dict(self.labels)


def read_model_config(path):
    """The models of the config file `path`, in its order (`ModelConfigError` if it
    cannot be read or served)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as error:
        raise ModelConfigError(f"{path}: cannot read the model config: {error}") from None
    return parse_model_config(text, path)


def parse_model_config(text, path="<model config>"):
    """`read_model_config` of the file's `text`; `path` names it in errors."""
    message = config_protos.model_server_config_pb2.ModelServerConfig()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as error:
        # ParseError's text is "LINE:COLUMN : what"; written as compilers do, path first.
        where = f"{error.GetLine()}:{error.GetColumn()}" if error.GetLine() else ""
        what = str(error).split(" : ", 1)[-1]
        raise ModelConfigError(f"{path}:{where}: {what}" if where else f"{path}: {what}") from None
    if message.WhichOneof("config") == "custom_model_config":
        raise ModelConfigError(f"{path}: custom_model_config is not served here; use model_config_list")
    lines = _FieldLines(text)
    models, names = [], set()
    for index, entry in enumerate(message.model_config_list.config):
        where = lambda field: f"{path}:{lines.line(index, field)}: {field} of model {entry.name!r}"  # noqa: E731
        if not MODEL_NAME.fullmatch(entry.name):
            raise ModelConfigError(
                f"{where('name')}: use letters, digits, '.', '_' and '-' (it is part of URLs)"
            )
        if entry.name in names:
            raise ModelConfigError(f"{where('name')}: a second model of this name")
        names.add(entry.name)
        if not entry.base_path:
            raise ModelConfigError(f"{path}:{lines.line(index, 'name')}: model {entry.name!r} has no base_path")
        if not os.path.isdir(entry.base_path):
            problem = "is not a directory" if os.path.exists(entry.base_path) else "does not exist"
            raise ModelConfigError(f"{where('base_path')}: {entry.base_path} {problem}")
        if entry.model_platform not in ("", "tensorflow"):
            platform = entry.model_platform
            raise ModelConfigError(f"{where('model_platform')}: {platform!r}; this server serves tensorflow")
        models.append(ServedModel(entry.name, entry.base_path, _policy(entry, where), _labels(entry, where)))
    return tuple(models)


def _policy(entry, where):
    policy = entry.model_version_policy
    kind = policy.WhichOneof("policy_choice") or LATEST
    if kind == LATEST:
        # TF Serving's default, also where `latest {}` leaves num_versions at 0.
        return VersionPolicy(LATEST, policy.latest.num_versions or 1)
    if kind == ALL:
        return VersionPolicy(ALL)
    versions = tuple(sorted(set(policy.specific.versions)))
    if not versions:
        raise ModelConfigError(f"{where('model_version_policy')}: specific {{}} names no version")
    return VersionPolicy(SPECIFIC, versions=versions)


def _labels(entry, where):
    for label, version in entry.version_labels.items():
        if not label:
            raise ModelConfigError(f"{where('version_labels')}: an empty label")
        if version <= 0:
            raise ModelConfigError(f"{where('version_labels')}: label {label!r} points at version {version}")
    return tuple(sorted(entry.version_labels.items()))


class _FieldLines:
    """The line of a field of the n-th `config { }` entry, for error messages (text_format
    keeps no positions). Comments are blanked first; `config` only opens an entry, as no
    field inside one is called that."""

    def __init__(self, text):
        self._text = re.sub(r"#[^\n]*", lambda m: " " * len(m.group()), text)
        self._starts = [m.start() for m in re.finditer(r"\bconfig\s*\{", self._text)]

    def line(self, index, field):
        if index >= len(self._starts):
            return "?"
        start = self._starts[index]
        end = self._starts[index + 1] if index + 1 < len(self._starts) else len(self._text)
        found = re.compile(rf"\b{field}\s*[:{{]").search(self._text, start, end)
        position = found.start() if found else start
        return self._text.count("\n", 0, position) + 1
