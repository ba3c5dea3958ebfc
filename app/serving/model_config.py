"""What the server serves: TF Serving's model config file, or the one model of its flags.

    models = read_model_config("serving/models.config")      # tuple of ServedModel (None: an empty file)
    check_config(models, served_before)                        # TF Serving's rules, in its order
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
      }
    }

A config is refused exactly where TF Serving 2.21 refuses it, with its messages, each
prefixed with the file and line of the model it is about
(tensorflow_serving/model_servers/server_core.cc, `ServerCore::ReloadConfig`): text that
does not parse (`parse_model_config`); then two models of one name, a base path that is
neither absolute nor a URI, and a model whose platform differs from the config served
before (`check_config`); then labels on versions that are not available (model_set.py);
then a platform that is missing, set twice or not "tensorflow" (`check_platforms`). A base
path that does not exist (yet) is not an error, as in TF Serving: the model has no version
until it appears. A refused config changes nothing; the server keeps the one it had.
"""

import dataclasses
import logging
import re
import urllib.parse

from google.protobuf import text_format

from app.serving.protos import config as config_protos

log = logging.getLogger("app.serve")

LATEST, ALL, SPECIFIC = "latest", "all", "specific"
# The platform this server serves (TF Serving's "tensorflow"; a CTranslate2 version
# directory is served under it too, as a version of a TensorFlow model would be).
TENSORFLOW = "tensorflow"


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
    """One `config { ... }` entry: a name, its base path, its policy, its labels, and its
    platform as written (`model_platform`, and the deprecated `model_type`'s number)."""

    name: str
    base_path: str
    policy: VersionPolicy = VersionPolicy()
    labels: tuple = ()  # ((label, version), ...), sorted by label
    platform: str = TENSORFLOW
    model_type: int = 0  # ModelType: 0 unspecified, 1 TENSORFLOW, 2 OTHER
    # "models.config:12", where the entry starts, for messages ("" for a model of the flags).
    source: str = dataclasses.field(default="", compare=False)
    # The model of --model_name and --model_base_path, whose path may be relative to where
    # the server starts (TF Serving refuses that too; every command here reads paths so).
    of_flags: bool = dataclasses.field(default=False, compare=False)

    @classmethod
    def from_flags(cls, name, base_path, num_versions=1):
        """The model of --model_name and --model_base_path, as TF Serving builds it."""
        return cls(name, base_path, VersionPolicy(LATEST, num_versions), of_flags=True)

    @property
    def label_map(self):
        return dict(self.labels)

    def refused(self, message):
        """A `ModelConfigError` of TF Serving's `message`, prefixed with where the model is written."""
        return ModelConfigError(f"{self.source}: {message}" if self.source else message)


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
    """`read_model_config` of the file's `text`; `path` names it in errors. None for a file
    that sets no config at all: TF Serving then "takes no action" (an empty
    `model_config_list {}` is a config: of no model)."""
    message = config_protos.model_server_config_pb2.ModelServerConfig()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as error:
        # ParseError's text is "LINE:COLUMN : what"; written as compilers do, path first.
        where = f"{error.GetLine()}:{error.GetColumn()}" if error.GetLine() else ""
        what = str(error).split(" : ", 1)[-1]
        raise ModelConfigError(f"{path}:{where}: {what}" if where else f"{path}: {what}") from None
    kind = message.WhichOneof("config")
    if kind is None:
        return None
    if kind == "custom_model_config":
        raise ModelConfigError(f"{path}: custom_model_config is not served here; use model_config_list")
    lines = _FieldLines(text)
    models = []
    for index, entry in enumerate(message.model_config_list.config):
        source = f"{path}:{lines.line(index, 'name')}"
        where = lambda field: f"{path}:{lines.line(index, field)}: {field} of model {entry.name!r}"  # noqa: E731
        models.append(ServedModel(
            entry.name, entry.base_path, _policy(entry, where), tuple(sorted(entry.version_labels.items())),
            platform=entry.model_platform, model_type=entry.model_type, source=source,
        ))
    return tuple(models)


def check_config(models, served=()):
    """TF Serving's checks of a new config that come before its labels, in its order
    (server_core.cc: `ValidateModelConfigList`, then the platform-change check of
    `ReloadConfig`): no two models of one name, every base path absolute or a URI, and no
    model whose platform differs from that of the model of its name in `served` (the config
    being served; () at start).

    Raises:
        ModelConfigError: TF Serving's message, after the model's file and line.
    """
    names = set()
    for model in models:
        if model.name in names:
            raise model.refused(f"Illegal to list model {model.name} multiple times in config list")
        names.add(model.name)
    for model in models:
        if _is_relative(model.base_path) and not model.of_flags:
            raise model.refused(
                f"Expected model {model.name} to have an absolute path or URI; got base_path()={model.base_path}"
            )
    before = {model.name: model for model in served}
    for model in models:
        if model.name in before:
            old, new = platform_of(before[model.name]), platform_of(model)
            if old != new:
                raise model.refused(
                    f"Illegal to change a model's platform. For model {model.name} platform was {old} and new "
                    f"platform requested is {new}"
                )


def check_platforms(models):
    """TF Serving's last check, as it adds the models (server_core.cc,
    `AddModelsViaModelConfigList`): each model's platform is set once and served here."""
    for model in models:
        platform = platform_of(model)
        if platform != TENSORFLOW:
            raise model.refused(f"Model {model.name} requests unsupported platform {platform}")


def platform_of(model):
    """A model's platform as TF Serving's `GetPlatform` reads it: `model_platform`, or the
    deprecated `model_type` TENSORFLOW, never both and never neither."""
    if model.model_type and model.platform:
        raise model.refused(
            "Illegal setting both ModelServerConfig::model_type (deprecated) and ModelServerConfig::model_platform."
        )
    if model.model_type == 1:
        return TENSORFLOW
    if model.model_type:
        raise model.refused(f"ModelServerConfig::model_type choice {model.model_type} not supported.")
    if not model.platform:
        raise model.refused(
            "Illegal setting neither ModelServerConfig::model_type (deprecated) nor ModelServerConfig::model_platform."
        )
    return model.platform


def _is_relative(base_path):
    """TF Serving's `UriIsRelativePath`: no scheme, no host, and a path not from the root."""
    parts = urllib.parse.urlsplit(base_path)
    return not parts.scheme and not parts.netloc and not base_path.startswith("/")


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
        # Served, as TF Serving serves it: a model with no version.
        log.warning("%s: specific {} names no version: the model will have none", where("model_version_policy"))
    return VersionPolicy(SPECIFIC, versions=versions)


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
