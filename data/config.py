"""`DataConfig`: what to read and how to cut it into batches.

One frozen dataclass, built from the command line by `app.cli.flags.data_config_from_args`
or directly in code and tests. Variants are copies: `dataclasses.replace(config, ...)`.
"""

import dataclasses
import re
from typing import Optional

from data.errors import DataError

# What a language may be called: "en", "pt-BR", "zh_Hans".
LANGUAGE_CODE = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")

# A shared BPE vocabulary of 8k pieces suits Multi30k (29k training pairs); see the
# measurements in data/tokenizer.py. WMT-sized corpora want ~32k-37k.
DEFAULT_VOCAB_SIZE = 8000
# Longer than any Multi30k sentence (longest: 50 source / 56 target ids); on WMT it drops
# the rare very long lines, whose batches would hold only a few rows.
DEFAULT_MAX_LENGTH = 256
# sentencepiece's segmentation algorithms: byte-pair encoding (Sennrich et al., 2016; the
# default, as in the paper) or the unigram language model (Kudo, 2018).
SUBWORD_MODELS = ("bpe", "unigram")
# `DataConfig.alignments`'s value that aligns train with eflomal (data/eflomal_alignments.py)
# instead of reading a file: a file of that name is given as ./eflomal.
EFLOMAL = "eflomal"
# `--guided-alignment`'s value for no guided alignment, where a size's recipe would train
# with it: a file of that name is given as ./none.
NO_ALIGNMENTS = "none"


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Where the parallel text comes from and how it is tokenized and batched."""

    # "multi30k" (bundled), a TensorFlow Datasets name such as "wmt14_translate/de-en"
    # (optionally prefixed "tfds:"), or "files:TRAIN_SRC,TRAIN_TGT[,VALID_SRC,VALID_TGT]".
    dataset: str = "multi30k"
    # Language codes; for TFDS they are the keys of the example's feature dict.
    source_lang: str = "en"
    target_lang: str = "de"
    # Pieces in the shared source+target subword vocabulary, reserved ids included.
    vocab_size: int = DEFAULT_VOCAB_SIZE
    # How the vocabulary is learned and text segmented: one of SUBWORD_MODELS.
    subword_model: str = "bpe"
    # Source (and target) tokens per batch across all replicas, padding included.
    # None means "per model size": the caller resolves it before `prepare_data`.
    batch_tokens: Optional[int] = None
    # Longest source or target row, in ids, markers included (source ends with the end
    # id; target has start and end). Longer pairs are dropped and counted.
    max_length: int = DEFAULT_MAX_LENGTH
    # BPE-dropout (Provilkov et al., 2020): in training batches only, each BPE merge is
    # skipped with this probability, so every epoch sees a fresh segmentation of the
    # same sentences. Validation, test and translation keep the deterministic one.
    # 0 turns it off. See data/tokenizer.py for what it costs in sequence length.
    bpe_dropout: float = 0.0
    # Lowercase all text before it is segmented, in training, evaluation and the exported
    # graph: the published Multi30k baselines' preprocessing. Off by default, because the
    # model then writes lowercase German, which is not what a reader wants.
    lowercase: bool = False
    # Gold word alignments of train, for guided alignment training (`--guided-alignment`):
    # a file of one Pharaoh line ("0-0 1-2": source word i, target word j, from 0) per
    # raw train line, empty pairs included, or EFLOMAL to have eflomal align train when
    # the data is prepared. They are stored with the pairs (data/shards.py). None: none.
    alignments: Optional[str] = None

    def __post_init__(self):
        # A language names a dataset's column and a part of the default model directory:
        # "../x" or "" there would put the run somewhere else, or nowhere.
        for field in ("source_lang", "target_lang"):
            language = getattr(self, field)
            if not (isinstance(language, str) and LANGUAGE_CODE.fullmatch(language)):
                raise DataError(
                    f"{field} {language!r} is not a language code: use letters, then letters, digits, '-' or '_' "
                    "(en, de, pt-BR, zh_Hans)"
                )
        if self.source_lang == self.target_lang:
            raise DataError(
                f"source and target language are both {self.source_lang!r}; "
                "choose two different languages"
            )
        if self.vocab_size < 300:
            # 4 reserved ids + 256 byte pieces + the corpus's characters.
            raise DataError(f"vocab_size must be at least 300, got {self.vocab_size}")
        if self.subword_model not in SUBWORD_MODELS:
            raise DataError(
                f"subword_model must be one of {SUBWORD_MODELS}, got {self.subword_model!r}"
            )
        if self.bpe_dropout and self.subword_model != "bpe":
            raise DataError(
                f"bpe_dropout {self.bpe_dropout} needs subword_model 'bpe', "
                f"got {self.subword_model!r}"
            )
        if self.max_length < 4:
            raise DataError(f"max_length must be at least 4, got {self.max_length}")
        if not 0.0 <= self.bpe_dropout < 1.0:
            raise DataError(f"bpe_dropout must be in [0, 1), got {self.bpe_dropout}")
        if self.alignments is not None and not (isinstance(self.alignments, str) and self.alignments.strip()):
            raise DataError(f"alignments must be a file of Pharaoh lines or {EFLOMAL!r}, got {self.alignments!r}")
        if self.batch_tokens is not None and self.batch_tokens < self.max_length:
            raise DataError(
                f"batch_tokens {self.batch_tokens} cannot hold one row of max_length "
                f"{self.max_length}"
            )
