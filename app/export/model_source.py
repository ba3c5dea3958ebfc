"""Which weights a command reads: a training run's, or one exported SavedModel version.

    source = ModelSource(model_dir="runs/tiny-multi30k-en-de", average_last=5)
    translator, weights = source.load_translator(DecodingConfig(beam_size=4))

    source = ModelSource(model_dir="runs/a", ensemble=("runs/b",))   # both, decoded as one ensemble

    source = ModelSource(saved_model="saved_models/translator/3")
    loaded = source.load_saved_model()

A frozen configuration, as `DataConfig` and `ModelConfig` are: the commands make it from
their flags once (`app.cli.model_source.model_source_from_args`, which checks the paths
and the flags' one conflict rule) and the library loads from it. No TensorFlow until a
load.
"""

import dataclasses
from typing import Optional

from app.decoding.config import DecodingConfig


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """The weights of one model (or of an ensemble of training runs): exactly one of
    `saved_model` and `model_dir`."""

    # One SavedModel version directory (app/export/locate.py finds it from an export base).
    saved_model: Optional[str] = None
    # A training run's directory, and which of its weights: `checkpoint` ("best", "latest",
    # a checkpoint path or a kept one's name) or the newest `average_last` averaged; with
    # neither, as its settings.json says (`app.export.saved_model.load_trained`).
    model_dir: Optional[str] = None
    checkpoint: Optional[str] = None
    average_last: Optional[int] = None
    # More training runs decoded with `model_dir`'s as one ensemble, each its weights chosen
    # by `checkpoint` and `average_last` alike, or by its own settings.json with neither
    # (app/export/ensemble.py); () for none.
    ensemble: tuple = ()

    def __post_init__(self):
        if (self.saved_model is None) == (self.model_dir is None):
            raise ValueError(
                f"a ModelSource reads a SavedModel or a model directory, one of them (saved_model="
                f"{self.saved_model!r}, model_dir={self.model_dir!r})"
            )
        if self.saved_model is not None and (self.checkpoint is not None or self.average_last is not None):
            raise ValueError(
                f"{self.saved_model}: a SavedModel holds the weights it was exported with; checkpoint and "
                "average_last choose among a model directory's"
            )
        if self.saved_model is not None and self.ensemble:
            raise ValueError(
                f"{self.saved_model}: a SavedModel holds the model (or ensemble) it was exported with; ensemble "
                "adds model directories to a model directory's"
            )

    @property
    def path(self):
        """The SavedModel version or the model directory read."""
        return self.saved_model or self.model_dir

    @property
    def model_dirs(self):
        """The training runs read, `model_dir` first; () for a SavedModel."""
        return () if self.model_dir is None else (self.model_dir, *self.ensemble)

    def load_trained(self):
        """The model directory's `TrainedModel` (its weights, configuration and tokenizer),
        the ensemble's other runs in its `ensemble`, checked to decode as one."""
        from app.export.ensemble import load_ensemble

        self._need_model_dir()
        return load_ensemble(self.model_dirs, self.checkpoint, self.average_last)

    def load_translator(self, decoding=DecodingConfig()):
        """`(Translator, a description of its weights)` of the model directory (or the
        ensemble), decoding by `decoding`."""
        from app.export.ensemble import describe

        trained = self.load_trained()
        return trained.translator(decoding), describe(self.model_dirs, trained)

    def load_saved_model(self):
        """The SavedModel version, loaded (`tf.saved_model.load`) with the ops of its tokenizer."""
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)

        if self.saved_model is None:
            raise ValueError(f"{self.model_dir} is a model directory, not a SavedModel")
        return tf.saved_model.load(self.saved_model)

    def _need_model_dir(self):
        if self.model_dir is None:
            raise ValueError(f"{self.saved_model} is a SavedModel: its weights cannot be loaded as a training run's")
