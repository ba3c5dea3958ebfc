"""The normalization a residual block uses, by the model configuration's name for it."""

from layers.layer_normalization import LayerNormalization
from layers.scale_normalization import ScaleNormalization

# "layer": the paper's layer norm; "scale": ScaleNorm (layers/scale_normalization.py).
NORMALIZATIONS = {"layer": LayerNormalization, "scale": ScaleNormalization}


def normalization_layer(kind, epsilon, **kwargs):
    """A new normalization layer of `kind` (a key of NORMALIZATIONS); kwargs are a Keras
    layer's (`name`, `dtype`)."""
    if kind not in NORMALIZATIONS:
        raise ValueError(f"normalization={kind!r}, expected one of {tuple(NORMALIZATIONS)}")
    return NORMALIZATIONS[kind](epsilon=epsilon, **kwargs)
