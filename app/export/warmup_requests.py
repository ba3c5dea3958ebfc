"""The warm-up requests an export carries, for TF Serving and the local server to run as
they load it (app/serving/warmup.py has the file's format and rules).

    requests = warmup_requests(translator.signatures())             # every signature
    requests = warmup_requests(translator.signatures(), ["serving_default"])

One request per signature, of one sentence. What is translated matters little: a first
call makes the executor of the whole signature, the branches it does not take included
(`constrained`'s first call, without a phrase, took 12.8 s on the default model; a second
with a phrase, which takes the constrained search's branch, 0.08 s). A sentence of a
dozen words runs the search past its first steps. The settings are the paper's and the
sampler's defaults, valid for any export; they need not be the export's own.
"""

import inspect

import numpy as np

from app.decoding.config import DecodingConfig, SamplingConfig

WARMUP_SENTENCE = "A man in a blue shirt is riding a bike down the street."
# The value of each input of the signatures, by name: a new input needs one here (an
# export with an input of no value is refused, so that none goes unwarmed unnoticed).
_DECODING, _SAMPLING = DecodingConfig(), SamplingConfig()
_VALUES = {
    "inputs": WARMUP_SENTENCE.encode(),
    "targets": WARMUP_SENTENCE.encode(),
    "alpha": _DECODING.alpha,
    "max_extra_length": _DECODING.max_extra_length,
    "seed": 1,
    "top_k": _SAMPLING.top_k,
    "top_p": _SAMPLING.top_p,
    "temperature": _SAMPLING.temperature,
    "prefixes": b"",
    "constraints": b"",
    "no_repeat_ngram_size": 0,
}


def warmup_requests(signatures, names=None):
    """`[(signature name, {input name: np.ndarray [1]})]` for the signatures `names` of
    `signatures` (`{name: tf.function with an input signature}`, as `Translator.signatures()`
    gives them), in the order of `signatures`; None: all of them.

    Raises:
        ValueError: a name that is not a signature, or an input of no known value.
    """
    names = list(signatures) if names is None else list(names)
    unknown = [name for name in names if name not in signatures]
    if unknown:
        raise ValueError(
            f"no signature {', '.join(map(repr, unknown))} to warm up; the export's are {', '.join(signatures)}"
        )
    requests = []
    for name, function in signatures.items():
        if name not in names:
            continue
        requests.append((name, {key: _value(name, key, spec) for key, spec in _named_inputs(function)}))
    return requests


def _named_inputs(function):
    """`[(input name, TensorSpec)]` of a tf.function with an input signature: a spec's name,
    else its argument's, as `tf.saved_model.save` names the input."""
    arguments = list(inspect.signature(function.python_function).parameters)
    return [(spec.name or argument, spec) for spec, argument in zip(function.input_signature, arguments)]


def _value(signature_name, key, spec):
    if key not in _VALUES:
        raise ValueError(f"no warm-up value for input {key!r} of signature {signature_name!r}")
    return np.array([_VALUES[key]], dtype=object if spec.dtype.name == "string" else spec.dtype.as_numpy_dtype)
