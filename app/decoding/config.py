"""How to decode: beam size, length penalty, output limit, parallel searches.

    DecodingConfig(beam_size=4, alpha=0.6, max_extra_length=50, parallel_searches=2)

No TensorFlow here: the commands' flags take their defaults from it before TensorFlow
loads (app/cli/flags.py), and decoding (translate.py) runs with it.
"""

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class DecodingConfig:
    """How to decode; the defaults are the paper's (section 6.1)."""

    # K, the number of beams (1 = greedy). A Python int: it fixes the loop's shapes.
    beam_size: int = 4
    # The GNMT length-penalty exponent; 0 ranks hypotheses by plain log-probability.
    alpha: float = 0.6
    # Each sentence may have at most (its source length + this) output tokens.
    max_extra_length: int = 50
    # How many beam searches share a call's sentences, side by side on TensorFlow's
    # inter-op threads (`translate_ids`); the translations are the same for any count.
    parallel_searches: int = 2

    def __post_init__(self):
        if not isinstance(self.beam_size, int) or self.beam_size < 1:
            raise ValueError(f"beam_size must be a positive int, got {self.beam_size!r}")
        if not isinstance(self.parallel_searches, int) or self.parallel_searches < 1:
            raise ValueError(f"parallel_searches must be a positive int, got {self.parallel_searches!r}")
        if self.max_extra_length < 1:
            raise ValueError(f"max_extra_length must be >= 1, got {self.max_extra_length!r}")
        # A negative exponent would rank short hypotheses above long ones; the serving
        # signature refuses one per request too.
        if not (math.isfinite(self.alpha) and self.alpha >= 0):
            raise ValueError(f"alpha must be a number >= 0, got {self.alpha!r}")
