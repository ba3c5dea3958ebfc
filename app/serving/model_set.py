"""The models a server serves, by name: one `ModelManager` each, changed by a new model config.

    models = ModelSet(make_manager)
    models.set_labels(config)      # first, all or none, as TF Serving sets them
    change = models.change_to(config)
    ... load what change.to_poll want (the server awaits its poll) ...
    models.commit(change)          # swaps the models in

A config adds, removes, re-points or re-policies models (model_config.py). As TF Serving, a
change never fails a request in flight and never leaves a served model without a version
while its new ones load: a model that is added or re-pointed at another base path gets a
manager of its own, loaded beside the one serving, and is swapped in only at `commit`;
a model whose policy changes keeps its manager, which loads what the new policy asks for
and unloads what it no longer does once that is available (models.py). Labels are set
first, before anything loads, as TF Serving's ServerCore sets them: a label may name only a
version available before the config (or, with --allow_version_labels_for_unavailable_models,
any version if the label is new), so a version and its label come in two configs.
"""

import dataclasses

from app.serving.models import check_labels
from app.serving.rest_api import ServingError


@dataclasses.dataclass
class ConfigChange:
    """What `ModelSet.change_to` prepared: the new config, the managers to poll before
    `commit`, and the fresh ones among them (added or re-pointed models)."""

    models: tuple
    to_poll: list
    fresh: dict  # name -> ModelManager


class ModelSet:
    """The served models by name (see the module docstring).

    Args:
        make_manager: `ServedModel -> ModelManager`.
        allow_labels_for_unavailable: TF Serving's --allow_version_labels_for_unavailable_models.
    """

    def __init__(self, make_manager, allow_labels_for_unavailable=False):
        self._make_manager = make_manager
        self.allow_labels_for_unavailable = allow_labels_for_unavailable
        self.config = ()  # the ServedModels of the config being served, in its order
        self.managers = {}  # name -> ModelManager
        self.labels = {}  # name -> {label: version}: the label map of the last config (`set_labels`)

    @property
    def default_name(self):
        """The model the page translates with: the config's first."""
        return self.config[0].name if self.config else None

    def get(self, name, version=None, label=None):
        """The loaded version a request for `name` (and `version` or `label`) is served by;
        TF Serving's errors otherwise (models.py)."""
        manager = self.managers.get(name)
        if manager is None:
            request = f"Specific({name}, {version})" if version is not None else f"Latest({name})"
            raise ServingError(f"Servable not found for request: {request}", status=404)
        return manager.get(version, label)

    def status_json(self, name, version=None):
        """GetModelStatus's answer for `name` (every version, or `version`), as both APIs
        give it; TF Serving's 404 for a model it lacks. A label is not asked for: TF
        Serving's GetModelStatus passes over a request's `version_label`
        (get_model_status_impl.cc), and its REST status of /labels/L with it."""
        manager = self.managers.get(name)
        if manager is None:
            raise ServingError(f"Could not find any versions of model {name}", status=404)
        return manager.status_json(version)

    def metadata_json(self, name, version=None, label=None):
        """GetModelMetadata's answer for the version a request for `name` is served by."""
        loaded = self.get(name, version, label)
        return self.managers[name].metadata_json(loaded.version)

    def change_to(self, models):
        """Prepares serving `models` (a tuple of `ServedModel`): updates the policies of
        models that stay where they are, and makes managers for the new and the re-pointed.
        Poll `to_poll`, then `commit`."""
        fresh, to_poll = {}, []
        for model in models:
            manager = self.managers.get(model.name)
            if manager is None or manager.base_path != model.base_path:
                fresh[model.name] = self._make_manager(model)
                to_poll.append(fresh[model.name])
            else:
                manager.policy = model.policy
                to_poll.append(manager)
        return ConfigChange(tuple(models), to_poll, fresh)

    def commit(self, change):
        """Serves `change.models`: swaps the fresh managers in (the ones they replace, and
        the models the config no longer names, are unloaded: requests in flight finish)
        with the labels `set_labels` set for them."""
        names = {model.name for model in change.models}
        for name, manager in list(self.managers.items()):
            if name not in names or name in change.fresh:
                manager.unload_all()
                del self.managers[name]
        for model in change.models:
            if model.name in change.fresh:
                self.managers[model.name] = change.fresh[model.name]
                self.managers[model.name].set_labels(self.labels.get(model.name, {}))
        self.managers = {model.name: self.managers[model.name] for model in change.models}  # the config's order
        self.config = change.models

    def set_labels(self, models):
        """Sets the labels of every model of `models` (a config's `ServedModel`s) at once, as
        TF Serving does before it loads what the config adds (server_core.cc, `ReloadConfig`):
        each must name a version available now, unless `allow_labels_for_unavailable`
        lets a label not already in use name any (`ModelManager.check_labels`). A model not
        served yet has no version available; its labels are set when it is swapped in.

        Raises:
            ServingError: FAILED_PRECONDITION; no label is changed then.
        """
        for model in models:
            manager = self.managers.get(model.name)
            available, current = (manager.loaded, manager.labels) if manager else ({}, {})
            check_labels(model.name, model.label_map, available, current, self.allow_labels_for_unavailable)
        self.labels = {model.name: model.label_map for model in models}
        for model in models:
            if model.name in self.managers:
                self.managers[model.name].set_labels(model.label_map)

