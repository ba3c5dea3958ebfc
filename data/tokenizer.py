"""`SubwordTokenizer`: one shared source+target subword vocabulary, applied in-graph.

The vocabulary is trained once with the `sentencepiece` Python trainer and saved as a
single file in the model directory; tokenization and detokenization then run as
TensorFlow ops (`tensorflow_text.SentencepieceTokenizer`), which TensorFlow Serving
ships, so an exported SavedModel takes raw strings. `SubwordTokenizer` is a `tf.Module`:
keep it as an attribute of the exported module; each traced function carries the
vocabulary (an attribute of its SentencepieceOp node), so the SavedModel needs no
assets.

Why the TF-Text tokenizer is created per call instead of once: its vocabulary lives in
a kernel-owned resource (TF-Text's TODO b/318839908) that TensorFlow destroys whenever
the eager kernel cache is cleared, which `tf.random.set_seed` and
`keras.utils.set_random_seed` do. A tokenizer built once and held would fail with
"Resource ... SentencepieceResource does not exist" after any later seeding. Created
per call, the op is cached by TensorFlow like any other kernel, so the call stays cheap,
and is simply rebuilt after a cache clear.

Reserved ids: `layers/special_tokens.py` (padding, start, end, unknown); the vocabulary is
trained with them and a model file that reserves others is refused.

Choices, each measured on Multi30k en-de (the figures:
docs/lab-notebook/2026-11-21-en-de-what-was-tried.md and
docs/lab-notebook/2026-11-26-records-moved-from-code-comments.md):

- BPE, not unigram. It is what the paper used (a shared source-target BPE), its merges
  are deterministic, and it trains faster. Unigram's one advantage, sampled
  segmentations for subword regularization, BPE has too: BPE-dropout (`--bpe-dropout`,
  `SubwordTokenizer.sample`; off by default, because within the tiny model's hour the
  longer sentences it makes cost more epochs than the regularization gave back). BPE
  also gives slightly shorter sequences. Unigram stays available (`--subword-model
  unigram`): trained the default way it kept pace with BPE but scored no better.
- 8,000 pieces by default (the paper's 37k is for 4.5M WMT pairs). Twice as many would
  shorten sequences only a little while doubling the embedding and softmax and leaving
  most new pieces with a handful of training occurrences; half as many halves the output
  layer, so tiny trains faster, but it fell behind after the first few thousand steps and
  ended lower even with the extra steps the hour allows.
- Byte fallback: a character outside the vocabulary becomes its UTF-8 bytes (pieces
  <0x00>..<0xFF>) instead of <unk>, so any Unicode text round-trips and the unknown id
  is never produced. Characters covering 99.95% of the text get their own piece.
- "nmt_nfkc" normalization (NFKC plus NMT-specific cleanup) and collapsing of repeated
  whitespace. Round trip is therefore exact only up to that normalization: on Multi30k
  almost every sentence comes back byte-identical, the rest differing only in odd or
  doubled spaces. Identity normalization would be exact, but web-crawled corpora (WMT)
  are full of compatibility characters (full-width forms, ligatures, odd spaces) that
  NFKC folds into one spelling.
- Case kept by default: output is what users read, and German capitalizes every noun.
  `lowercase=True` (`--lowercase`) lowercases every input before it is segmented,
  in training, evaluation and the exported graph alike, so the model reads and writes
  lowercased text: the preprocessing of the published Multi30k baselines, whose BLEU
  is computed on lowercased text. It is a property of the run (settings.json), not of
  the vocabulary file; pass it back to `SubwordTokenizer.load`. Lowercasing is
  `tf.strings.lower` (ICU, full Unicode; "ß" stays), one definition for Python and graph.
- Deterministic training: the trainer reads the sentences in the order given and does
  not sample them, and uses a fixed thread count, because its result depends on the
  thread count (the same count gives byte-identical files).
"""

import io
import itertools
import os
import re
import sys
import time
from typing import Callable, Iterable, Iterator, List, Optional

import sentencepiece
import tensorflow as tf
import tensorflow_text as tf_text
from sentencepiece import sentencepiece_model_pb2

from data.atomic_files import write_atomically
from data.errors import DataError, first_line
from data.words import WHITE_SPACE_CODE_POINTS
from layers.special_tokens import END_ID, PAD_ID, START_ID, UNKNOWN_ID

# C0 and C1 control characters, DEL, and the Unicode line and paragraph separators (RE2
# syntax): what Python's str.splitlines() or a C string would break a translation at. A
# run of them, with the spaces beside it, becomes one space.
_CONTROL = r"\x{0}-\x{1f}\x{7f}-\x{9f}\x{2028}\x{2029}"
_NOT_ON_ONE_LINE = rf" *[{_CONTROL}][ {_CONTROL}]*"

MODEL_FILENAME = "subwords.model"
# Sentences lowercased per TensorFlow call while the trainer reads them.
_LOWERCASE_CHUNK = 10_000

_TRAINER_OPTIONS = dict(
    normalization_rule_name="nmt_nfkc",
    byte_fallback=True,
    character_coverage=0.9995,
    pad_id=PAD_ID,
    bos_id=START_ID,
    eos_id=END_ID,
    unk_id=UNKNOWN_ID,
    # A corpus too small for the asked size gets a smaller vocabulary, not an error.
    hard_vocab_limit=False,
    # Use every sentence, in the given order: no sampling, no shuffling.
    input_sentence_size=0,
    shuffle_input_sentence=False,
    # The result depends on the thread count; fixing it makes the file the same on
    # every machine.
    num_threads=8,
    minloglevel=2,
)


class SubwordTokenizer(tf.Module):
    """Shared subword vocabulary with in-graph `tokenize` and `detokenize`.

    Build with `SubwordTokenizer.train(...)`, `SubwordTokenizer.load(path)` or
    `load_or_train(model_dir, ...)`.
    """

    def __init__(self, model_proto: bytes, lowercase: bool = False, name: str = "subword_tokenizer"):
        super().__init__(name=name)
        try:
            processor = sentencepiece.SentencePieceProcessor(model_proto=model_proto)
        except RuntimeError:  # sentencepiece's failed CHECK, whose message is only its source line.
            raise DataError("not a sentencepiece model: its bytes do not parse as one") from None
        if processor.get_piece_size() == 0:  # An empty file parses as a model without pieces.
            raise DataError("not a sentencepiece model: it holds no pieces")
        reserved = (processor.pad_id(), processor.bos_id(), processor.eos_id(), processor.unk_id())
        if reserved != (PAD_ID, START_ID, END_ID, UNKNOWN_ID):
            raise DataError(
                f"subword model has reserved ids (pad, start, end, unknown) = {reserved}; "
                f"expected {(PAD_ID, START_ID, END_ID, UNKNOWN_ID)}"
            )
        self._model_proto = model_proto
        self._vocab_size = processor.get_piece_size()
        self._lowercase = bool(lowercase)

    def _sentencepiece(self) -> tf_text.SentencepieceTokenizer:
        # Per call, not once: see "Why the TF-Text tokenizer is created per call" above.
        return tf_text.SentencepieceTokenizer(model=self._model_proto, out_type=tf.int32)

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        vocab_size: int,
        model_path: str,
        lowercase: bool = False,
        model_type: str = "bpe",
        log: Optional[Callable[[str], None]] = None,
    ) -> "SubwordTokenizer":
        """Trains a vocabulary on `texts` (in their order) and writes it to `model_path`.

        Args:
            texts: sentences, source and target sides together.
            vocab_size: pieces wanted, reserved ids and byte pieces included; a small
                corpus may give fewer.
            model_path: file to write; written atomically, parent directories created.
            lowercase: train on (and later tokenize) lowercased text.
            model_type: "bpe" or "unigram"; recorded in the file, so loading needs no flag.
            log: called with a line when training starts, when the trainer has read every
                sentence (it learns the pieces after), and when it ends; default: stderr.
                On a large corpus each part takes minutes.

        Raises:
            DataError: the text cannot give a vocabulary: it has more distinct characters
                than `vocab_size` holds, or no sentence the trainer reads. Nothing is written.
        """
        log = log or _log_to_stderr
        sized = texts
        if lowercase:
            texts = _lowercased(texts)
        started = time.monotonic()
        read = [0]  # sentences the trainer has read

        def counted():
            for text in texts:
                read[0] += 1
                yield text
            seconds = time.monotonic() - started
            log(f"vocabulary: read {read[0]:,} sentences in {seconds:.1f} s; learning the pieces")

        # A stream (the training corpus, read once) tells its count only once read.
        on = f"{len(sized):,} sentences" if hasattr(sized, "__len__") else "the training sentences, streamed"
        log(f"training the vocabulary: {vocab_size:,} {model_type} pieces on {on}")
        model = io.BytesIO()
        try:
            sentencepiece.SentencePieceTrainer.train(
                sentence_iterator=counted(),
                model_writer=model,
                vocab_size=vocab_size,
                model_type=model_type,
                **_TRAINER_OPTIONS,
            )
        except RuntimeError as error:  # The trainer's failed CHECKs: the text cannot give a vocabulary.
            raise DataError(_trainer_failure(error, vocab_size)) from None
        write_atomically(model_path, model.getvalue())  # Never a half-written vocabulary.
        tokenizer = cls(model.getvalue(), lowercase=lowercase)
        seconds = time.monotonic() - started
        log(f"vocabulary: {tokenizer.vocab_size:,} pieces from {read[0]:,} sentences in {seconds:.1f} s")
        return tokenizer

    @classmethod
    def load(cls, model_path: str, lowercase: bool = False) -> "SubwordTokenizer":
        """Reads a vocabulary file written by `train`; `lowercase` as it was trained.

        Raises:
            DataError: naming `model_path`, if it is missing or not such a vocabulary.
        """
        if not os.path.isfile(model_path):
            raise DataError(f"subword model not found: {model_path}")
        with open(model_path, "rb") as file:
            model_proto = file.read()
        try:
            return cls(model_proto, lowercase=lowercase)
        except DataError as error:
            raise DataError(f"{model_path}: {error}") from None

    @property
    def vocab_size(self) -> int:
        """Number of ids: every id is in [0, vocab_size)."""
        return self._vocab_size

    @property
    def pad_id(self) -> int:
        return PAD_ID

    @property
    def start_id(self) -> int:
        return START_ID

    @property
    def end_id(self) -> int:
        return END_ID

    @property
    def unknown_id(self) -> int:
        return UNKNOWN_ID

    @property
    def lowercase(self) -> bool:
        """Whether text is lowercased before it is segmented (output is then lowercase)."""
        return self._lowercase

    @property
    def model_proto(self) -> bytes:
        """The serialized sentencepiece model (the bytes of the vocabulary file)."""
        return self._model_proto

    def model_text(self, strings: tf.Tensor) -> tf.Tensor:
        """string [B] -> string [B]: the text the vocabulary segments, lowercased for a
        lowercasing model; `tokenize_with_offsets` gives offsets into it. Lowercasing
        changes no White_Space, so it has the words of `strings` (data/words.py)."""
        return lowercase_strings(strings) if self._lowercase else strings

    def tokenize(self, strings: tf.Tensor) -> tf.RaggedTensor:
        """Raw text to subword ids, in-graph; no start or end id is added.

        Args:
            strings: string [B].

        Returns:
            int32 RaggedTensor [B, None].
        """
        return self._sentencepiece().tokenize(self.model_text(strings))

    def tokenize_with_offsets(self, strings: tf.Tensor):
        """`tokenize`, with where each piece lies in the text: the ids, then each piece's
        first byte and the byte after its last, in `model_text(strings)` (UTF-8 bytes).

        Offsets refer to the text before normalization: a piece of normalized text that
        stands for several bytes of the input covers them all (NFKC folds "\xa0a" into
        "▁a", bytes 0 to 3), and the byte-fallback pieces of one character all start at its
        first byte, the last ending after its last (`<0xF0>` (0, 0) ... `<0xB4>` (0, 4)).

        Args:
            strings: string [B].

        Returns:
            `(ids int32, begins int64, ends int64)`, RaggedTensors [B, None] of one shape.
        """
        return self._sentencepiece().tokenize_with_offsets(self.model_text(strings))

    def sample(self, sentences: List[str], dropout: float, seed: int) -> List[List[int]]:
        """BPE-dropout segmentations of `sentences`, for training batches only.

        Each BPE merge is skipped with probability `dropout`, so a word may come out
        as smaller pieces of the same vocabulary; the ids still detokenize to the same
        text. Runs in Python (sentencepiece), not in the graph: it is never exported.

        Args:
            sentences: raw text, N sentences.
            dropout: merge-skipping probability in (0, 1).
            seed: seeds sentencepiece's process-wide generator. Within one process the same
                seed gives the same segmentations; another process given the same seed
                draws others (sentencepiece 0.2.3), so a run with BPE-dropout is not
                reproduced to the digit by another process.

        Returns:
            N lists of ids, no start or end id added.
        """
        sentences = lowercase_lines(list(sentences)) if self._lowercase else list(sentences)
        processor = sentencepiece.SentencePieceProcessor(model_proto=self._model_proto)
        # The generator is process-wide; one thread keeps the draws in sentence order,
        # so the result depends on the seed alone (more threads interleave the draws).
        sentencepiece.set_random_generator_seed(seed)
        return processor.encode(
            sentences, out_type=int, enable_sampling=True, alpha=dropout, nbest_size=-1, num_threads=1
        )

    def detokenize(self, ids) -> tf.Tensor:
        """Ids to clean text, in-graph: the inverse of `tokenize` up to normalization.

        Padding and start ids are skipped, each row stops before its first end id, and
        ids outside [0, vocab_size) (an output layer padded past the vocabulary) are
        skipped. Each text is one line: control characters and line separators, which
        byte-fallback pieces can spell (a poorly trained model writes "<0x0A>"), become
        spaces, so one translation a line stays one translation a line.

        Args:
            ids: integer [B, T], dense or ragged.

        Returns:
            string [B].
        """
        if isinstance(ids, tf.RaggedTensor):
            ids = ids.to_tensor(default_value=PAD_ID)
        ids = tf.cast(ids, tf.int32)  # [B, T]
        before_end = tf.math.cumsum(tf.cast(ids == END_ID, tf.int32), axis=1) == 0
        keep = before_end & (ids != PAD_ID) & (ids != START_ID) & (ids >= 0) & (ids < self._vocab_size)
        texts = self._sentencepiece().detokenize(tf.ragged.boolean_mask(ids, keep))  # [B]
        return tf.strings.regex_replace(texts, _NOT_ON_ONE_LINE, " ")  # [B]


def _log_to_stderr(line: str) -> None:
    # Not stdout: a command's results go there.
    print(line, file=sys.stderr, flush=True)


def _trainer_failure(error: RuntimeError, vocab_size: int) -> str:
    """What a failed sentencepiece training means for the user, from the trainer's message
    (a failed CHECK, e.g. "... Vocabulary size is smaller than required_chars. 300 vs 5259.
    Increase vocab_size or decrease character_coverage with --character_coverage option.",
    which names an option that this project does not have)."""
    message = str(error)
    too_small = re.search(r"smaller than required_chars\. \d+ vs (\d+)", message)
    if too_small:
        return (
            f"vocab_size {vocab_size} is too small for the training text: the characters that "
            f"make up {_TRAINER_OPTIONS['character_coverage']:.2%} of it each need a piece, "
            f"{too_small.group(1)} pieces with the reserved and byte pieces; use a vocab_size "
            f"of at least {too_small.group(1)}"
        )
    # The trainer skips empty lines and lines longer than its max_sentence_length.
    if "sentences_.empty()" in message or "all_chars_count" in message:
        longest = sentencepiece_model_pb2.TrainerSpec().max_sentence_length
        return (
            "no sentence to learn the subword vocabulary from: every training sentence is "
            f"empty or longer than {longest} bytes, the longest the trainer reads"
        )
    return f"could not learn a subword vocabulary of {vocab_size} pieces: {first_line(error)}"


def _characters_words(strings):
    """Where each character of `strings` starts and which word it belongs to, by
    data/words.py's rule (white space belongs to the next word).

    Args:
        strings: string [B], UTF-8.

    Returns:
        `(starts int64 [B, C], words int32 [B, C], counts int32 [B])`: each character's
        first byte (padding past every byte), its word's index (white space after the last
        word: `counts`), and each string's number of words.
    """
    characters, starts = tf.strings.unicode_decode_with_offsets(strings, "UTF-8")  # ragged [B, None]
    characters = characters.to_tensor(default_value=-1)  # [B, C]; -1: no character
    starts = starts.to_tensor(default_value=tf.int64.max)  # [B, C]; sorted, padding after every byte
    white_space = tf.constant(WHITE_SPACE_CODE_POINTS, tf.int32)  # [W]
    space = tf.cast(tf.reduce_any(characters[:, :, None] == white_space, axis=2), tf.int32)  # [B, C]
    # Padded then cut, not concatenated, so that C = 0 (every string empty) keeps its shape.
    after_space = tf.pad(space, [[0, 0], [1, 0]], constant_values=1)[:, :-1]  # [B, C]: or first
    first = (1 - space) * after_space * tf.cast(characters >= 0, tf.int32)  # [B, C]: a word's first character
    started = tf.math.cumsum(first, axis=1)  # [B, C]: words begun so far
    words = tf.where(space == 1, started, started - 1)  # [B, C]
    return starts, words, tf.reduce_sum(first, axis=1)


def word_counts(strings: tf.Tensor) -> tf.Tensor:
    """string [B] -> int32 [B]: each string's number of words (`data.words.words`), in-graph."""
    return _characters_words(strings)[2]


def piece_words(strings: tf.Tensor, begins: tf.RaggedTensor, ends: tf.RaggedTensor) -> tf.RaggedTensor:
    """Each subword piece's word, in-graph: `data.words.piece_words` (the rule, and its
    Python twin, held equal by tests/data/test_words.py) over a batch.

    Args:
        strings: string [B], the text the pieces were cut from (`SubwordTokenizer.model_text`).
        begins, ends: int64 RaggedTensors [B, None], each piece's byte offsets in it
            (`SubwordTokenizer.tokenize_with_offsets`).

    Returns:
        int32 RaggedTensor [B, None] of `begins`' shape: the word's index, -1 for none.
    """
    starts, words, counts = _characters_words(strings)  # [B, C], [B, C], [B]
    begins, ends, lengths = begins.to_tensor(), ends.to_tensor(), begins.row_lengths()  # [B, P], [B, P], [B]
    byte = tf.where(ends > begins, ends - 1, begins)  # [B, P]: the last byte, or the first of an empty piece
    character = tf.searchsorted(starts, byte, side="right", out_type=tf.int32) - 1  # [B, P]
    # A padding piece of an empty string finds no character; it is cut off below.
    word = tf.gather(words, tf.maximum(character, 0), batch_dims=1)  # [B, P]
    word = tf.where(word < counts[:, None], word, -1)  # [B, P]
    return tf.RaggedTensor.from_tensor(word, lengths=lengths)


def lowercase_strings(strings: tf.Tensor) -> tf.Tensor:
    """string [...] -> string [...]: UTF-8 text lowercased (ICU's full Unicode mapping)."""
    return tf.strings.lower(strings, encoding="utf-8")


def lowercase_lines(lines: List[str]) -> List[str]:
    """`lowercase_strings` for Python strings, so Python and graph agree character for character."""
    if not lines:
        return []
    return [line.decode("utf-8") for line in lowercase_strings(tf.constant(lines, tf.string)).numpy()]


def _lowercased(texts: Iterable[str]) -> Iterator[str]:
    """`lowercase_lines` over `texts` a chunk at a time: never the whole sample twice in memory."""
    texts = iter(texts)
    while True:
        chunk = list(itertools.islice(texts, _LOWERCASE_CHUNK))
        if not chunk:
            return
        yield from lowercase_lines(chunk)


def _trainer_spec(model_proto: bytes):
    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(model_proto)
    return model.trainer_spec


def trained_vocab_size(model_proto: bytes) -> int:
    """The vocab_size the model was trained with (its actual size may be smaller)."""
    return _trainer_spec(model_proto).vocab_size


def trained_model_type(model_proto: bytes) -> str:
    """The segmentation algorithm the model was trained with: "bpe", "unigram", ..."""
    spec = _trainer_spec(model_proto)
    return spec.ModelType.Name(spec.model_type).lower()


def load_or_train(
    model_dir: str,
    texts_fn: Callable[[], Iterable[str]],
    vocab_size: int,
    lowercase: bool = False,
    model_type: str = "bpe",
    cached=None,
    log: Optional[Callable[[str], None]] = None,
) -> SubwordTokenizer:
    """The vocabulary in `model_dir`, trained on `texts_fn()` first if it is not there yet.

    `lowercase` is not recorded in the vocabulary file: the run's settings.json holds it,
    and resuming with another value is refused there.

    `cached`: a `data.vocabulary_cache.VocabularyCache`, or None. A vocabulary missing
    from `model_dir` is copied from it when it holds one, instead of trained; one trained
    is stored in it.

    `log`: where `SubwordTokenizer.train` writes its progress lines (default stderr).

    Raises:
        DataError: the existing vocabulary was trained for another `vocab_size` or
            `model_type`.
    """
    model_path = os.path.join(model_dir, MODEL_FILENAME)
    if not os.path.exists(model_path):
        model_proto = cached.read() if cached is not None else None
        if model_proto is None:
            tokenizer = SubwordTokenizer.train(
                texts_fn(), vocab_size, model_path, lowercase=lowercase, model_type=model_type, log=log
            )
            if cached is not None:
                cached.write(tokenizer.model_proto)
            return tokenizer
        write_atomically(model_path, model_proto)
    tokenizer = SubwordTokenizer.load(model_path, lowercase=lowercase)
    trained_for = trained_vocab_size(tokenizer.model_proto)
    if trained_for != vocab_size:
        raise DataError(
            f"{model_path} was trained with vocab_size {trained_for}, but vocab_size "
            f"{vocab_size} was asked; use a new model directory or the old size"
        )
    trained_type = trained_model_type(tokenizer.model_proto)
    if trained_type != model_type:
        raise DataError(
            f"{model_path} is a {trained_type!r} vocabulary, but subword model "
            f"{model_type!r} was asked; use a new model directory or the old model"
        )
    return tokenizer
