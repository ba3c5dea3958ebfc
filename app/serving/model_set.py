"""The models a server serves, by name: one `ModelManager` each, changed by a new model config.

    models = ModelSet(make_manager)
    change = models.change_to(read_model_config("models.config"))
    ... load what change.to_poll want (the server awaits its poll) ...
    models.commit(change)          # swaps the models in, then sets the labels, all or none

A config adds, removes, re-points or re-policies models (model_config.py). As TF Serving, a
change never fails a request in flight and never leaves a served model without a version
while its new ones load: a model that is added or re-pointed at another base path gets a
manager of its own, loaded beside the one serving, and is swapped in only at `commit`;
a model whose policy changes keeps its manager, which loads what the new policy asks for
and unloads what it no longer does once that is available (models.py). Labels are set
last, when the versions they name are loaded, as TF Serving's ServerCore does.
"""

import dataclasses

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

    def status_json(self, name, version=None, label=None):
        """GetModelStatus's answer for `name` (every version, or `version`, or the one
        `label` names), as both APIs give it; TF Serving's 404 for a model it lacks."""
        manager = self.managers.get(name)
        if manager is None:
            raise ServingError(f"Could not find any versions of model {name}", status=404)
        if label is not None:
            version = manager.get(label=label).version
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
        the models the config no longer names, are unloaded: requests in flight finish),
        then sets every model's labels.

        Raises:
            ServingError: FAILED_PRECONDITION where a label names a version that is not
                loaded; no label is changed then (the models are).
        """
        names = {model.name for model in change.models}
        for name, manager in list(self.managers.items()):
            if name not in names or name in change.fresh:
                manager.unload_all()
                del self.managers[name]
        for model in change.models:
            if model.name in change.fresh:
                self.managers[model.name] = change.fresh[model.name]
        self.managers = {model.name: self.managers[model.name] for model in change.models}  # the config's order
        self.config = change.models
        self.set_labels({model.name: model.label_map for model in change.models})

    def set_labels(self, labels):
        """`{model name: {label: version}}` for every model, all or none (FAILED_PRECONDITION)."""
        for name, model_labels in labels.items():
            self.managers[name].check_labels(model_labels, self.allow_labels_for_unavailable)
        for name, model_labels in labels.items():
            self.managers[name].set_labels(model_labels, self.allow_labels_for_unavailable)
