"""Gold word alignments through the preparation (guided alignment training): filtered in
step with their pairs, checked against the words, stored in the shards, part of the
fingerprint, assembled into each batch's gold and swapped for reversed pairs."""

import os

import numpy as np
import pytest

from app.commands.prepare import parse_args, plan_prepare
from data.config import DataConfig
from data.corpora import held_out_indices
from data.dataset import prepare_data, prepare_shards
from data.errors import DataError
from data.shards import BothDirections, ShardedPairs

# Two kinds of pair, each with its own links: were a line to go with another pair, the
# gold would show it. B's target reorders its words.
A = ("a man runs", "ein mann läuft", "0-0 1-1 2-1 2-2")
B = ("the dog sits", "sitzt der hund", "0-1 1-2 2-0")
# Gold [T - 1, S] of each kind: label t (the target's pieces, then the end token) by source
# piece s (then the end token); every word is one piece of the test's vocabulary.
GOLD = {
    A: [[1, 0, 0, 0], [0, 1, 1, 0], [0, 0, 1, 0], [0, 0, 0, 0]],
    B: [[0, 0, 1, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 0]],
}
VALIDATION = [("a dog runs", "ein hund läuft"), ("the man sits", "der mann sitzt")] * 5
# After them, pairs of made-up words without links: enough text for the vocabulary to reach
# its size (a vocabulary trained smaller than asked is refused the next time), too rare to
# cut A's and B's words, each of which stays one piece.
_RNG = np.random.default_rng(0)
FILLER = [
    tuple(" ".join("".join(_RNG.choice(list("bcdfgkmoptvwxyz"), 6)) for _ in range(5)) for _ in range(2))
    for _ in range(120)
]


def _write(directory, pairs, alignment_lines, validation=True):
    """A files: dataset of `pairs` with `alignment_lines`; returns (dataset, alignments path)."""
    paths = {name: str(directory / name) for name in ("train.en", "train.de", "train.al", "val.en", "val.de")}
    columns = {"train.en": [s for s, _ in pairs], "train.de": [t for _, t in pairs], "train.al": alignment_lines}
    columns.update({"val.en": [s for s, _ in VALIDATION], "val.de": [t for _, t in VALIDATION]})
    for name, lines in columns.items():
        with open(paths[name], "w", encoding="utf-8") as file:
            file.write("".join(line + "\n" for line in lines))
    files = ["train.en", "train.de"] + (["val.en", "val.de"] if validation else [])
    return "files:" + ",".join(paths[name] for name in files), paths["train.al"]


def _corpus(count=80):
    """`count` pairs, A and B in turn, then `FILLER`; their alignment lines; the kinds."""
    kinds = [A if k % 2 == 0 else B for k in range(count)]
    pairs = [(s, t) for s, t, _ in kinds] + FILLER
    return pairs, [links for _, _, links in kinds] + [""] * len(FILLER), kinds


def _config(dataset, alignments, **overrides):
    return DataConfig(
        dataset=dataset, vocab_size=400, batch_tokens=512, max_length=32, alignments=alignments, **overrides
    )


def _quiet(*_):
    pass


def test_an_empty_pair_goes_with_its_line_and_the_gold_is_the_pairs(tmp_path):
    pairs, lines, kinds = _corpus()
    pairs[1], lines[1] = ("", "leer"), "9-9"  # line 2: an empty pair whose links fit nothing
    dataset, alignments = _write(tmp_path, pairs, lines)
    counts = prepare_shards(_config(dataset, alignments), str(tmp_path / "model"), workers=1, log=_quiet)
    assert counts["train"].dropped_empty == 1 and counts["train"].kept == 79 + len(FILLER)
    train = ShardedPairs(str(tmp_path / "model" / "data"), "train")
    assert train.has_alignments and train.manifest["alignments"] is True
    assert train.manifest["alignments_dropped_mismatch"] == 0
    # Every word is one piece here; the pair ends with the end token (2).
    source, _, gold = train.assemble([0, 1], 3, 4, 5)
    assert (source[:2, 3] == 2).all() and (source[:2, :3] > 3).all()
    assert gold.dtype == np.uint8 and gold.shape == (3, 4, 4)
    # Pair 0 is line 1 (A); pair 1 is line 3 (A): line 2 left with its empty pair.
    np.testing.assert_array_equal(gold[0], GOLD[A])
    np.testing.assert_array_equal(gold[1], GOLD[A])
    np.testing.assert_array_equal(gold[2], np.zeros([4, 4]))  # a padding row
    kept = [kind for k, kind in enumerate(kinds) if k != 1]
    _, _, every = train.assemble(np.arange(len(kept)), len(kept), 4, 5)
    for row, kind in enumerate(kept):
        np.testing.assert_array_equal(every[row], GOLD[kind], err_msg=f"pair {row}")


def test_reversed_pairs_take_the_links_swapped(tmp_path):
    pairs, lines, _ = _corpus()
    dataset, alignments = _write(tmp_path, pairs, lines)
    prepare_shards(_config(dataset, alignments), str(tmp_path / "model"), workers=1, log=_quiet)
    train = ShardedPairs(str(tmp_path / "model" / "data"), "train")
    both = BothDirections(train, max_length=32)
    _, _, gold = both.assemble([0, len(train), 1, len(train) + 1], 4, 4, 5)
    np.testing.assert_array_equal(gold[0], GOLD[A])
    np.testing.assert_array_equal(gold[2], GOLD[B])
    for row, kind in ((1, A), (3, B)):  # reversed: the word block transposed
        want = np.zeros([4, 4], np.uint8)
        want[:3, :3] = np.asarray(GOLD[kind])[:3, :3].T
        np.testing.assert_array_equal(gold[row], want)


def test_held_out_validation_takes_its_lines_out_of_train_too(tmp_path):
    pairs, lines, kinds = _corpus(300)
    dataset, alignments = _write(tmp_path, pairs, lines, validation=False)
    data = prepare_data(_config(dataset, alignments), str(tmp_path / "model"), workers=1, log=_quiet)
    held = held_out_indices(300 + len(FILLER))
    assert held[0] == 0 and 0 < held[1] < 300  # A's and B's pairs too
    kept = [kind for k, kind in enumerate(kinds) if k not in held]
    train = data.tokens["train"]
    assert len(train) == 300 + len(FILLER) - len(held)
    _, _, gold = train.assemble(np.arange(len(kept)), len(kept), 4, 5)
    for row, kind in enumerate(kept):
        np.testing.assert_array_equal(gold[row], GOLD[kind], err_msg=f"pair {row}")
    assert not data.tokens["validation"].has_alignments


def test_training_batches_carry_the_gold(tmp_path):
    pairs, lines, _ = _corpus()
    dataset, alignments = _write(tmp_path, pairs, lines)
    data = prepare_data(_config(dataset, alignments), str(tmp_path / "model"), workers=1, log=_quiet)
    batches = list(data.train_batches(0))
    assert batches and all(len(batch) == 3 for batch in batches)
    for source, target, gold in batches:
        assert gold.dtype.name == "uint8"
        assert tuple(gold.shape) == (source.shape[0], target.shape[1] - 1, source.shape[1])
    assert sum(int(gold.numpy().sum()) for _, _, gold in batches) == 40 * (4 + 3)  # every link of every pair
    assert all(len(batch) == 2 for batch in data.eval_batches("validation"))


def test_a_link_outside_the_pairs_words_names_the_file_line_link_and_counts(tmp_path):
    pairs, lines, _ = _corpus()
    lines[2] = "0-0 3-7"
    dataset, alignments = _write(tmp_path, pairs, lines)
    with pytest.raises(DataError) as raised:
        prepare_shards(_config(dataset, alignments), str(tmp_path / "model"), workers=1, log=_quiet)
    message = str(raised.value)
    assert f"{alignments}:3" in message and "3-7" in message
    assert "3 source and 3 target words" in message


def test_a_file_of_another_length_names_both_counts(tmp_path):
    pairs, lines, _ = _corpus()
    dataset, alignments = _write(tmp_path, pairs, lines[:-1])
    total = 80 + len(FILLER)
    with pytest.raises(DataError, match=f"{alignments} has {total - 1} lines but train has {total} pairs"):
        prepare_shards(_config(dataset, alignments), str(tmp_path / "model"), workers=1, log=_quiet)


def test_a_changed_file_prepares_train_again_and_says_why(tmp_path):
    pairs, lines, _ = _corpus()
    dataset, alignments = _write(tmp_path, pairs, lines)
    config = _config(dataset, alignments)
    prepare_shards(config, str(tmp_path / "model"), workers=1, log=_quiet)
    status = os.stat(alignments)
    os.utime(alignments, ns=(status.st_atime_ns, status.st_mtime_ns + 10**9))
    logged = []
    prepare_shards(config, str(tmp_path / "model"), workers=1, log=logged.append)
    rebuilt = [line for line in logged if "preparing it again" in line and os.path.join("data", "train") in line]
    assert rebuilt and "alignments_input" in rebuilt[0]


def test_without_alignments_the_fingerprint_is_what_it_was(tmp_path):
    from data.corpora import open_corpus
    from data.prepare import fingerprint

    pairs, _, _ = _corpus()
    dataset, _ = _write(tmp_path, pairs, [])
    wanted = fingerprint(_config(dataset, None), b"vocabulary", open_corpus(dataset, "en", "de"))
    assert set(wanted) == {"format", "data", "vocabulary_sha256", "input"} and "alignments" not in wanted["data"]


def test_a_pair_whose_pieces_do_not_mark_its_words_keeps_no_links_and_is_counted(tmp_path):
    pairs, lines, _ = _corpus()
    # NFKC makes "¨" a space and a combining diaeresis: one word, two word-starting pieces.
    pairs[4], lines[4] = ("a man¨ runs", "ein mann läuft"), A[2]
    dataset, alignments = _write(tmp_path, pairs, lines)
    prepare_shards(_config(dataset, alignments), str(tmp_path / "model"), workers=1, log=_quiet)
    train = ShardedPairs(str(tmp_path / "model" / "data"), "train")
    assert train.manifest["alignments_dropped_mismatch"] == 1
    _, _, gold = train.assemble([4, 6], 2, 8, 5)
    assert gold[0].sum() == 0
    np.testing.assert_array_equal(gold[1, :, :4], GOLD[A])


def test_bpe_dropout_segmentations_keep_the_links(tmp_path):
    pairs, lines, _ = _corpus()
    dataset, alignments = _write(tmp_path, pairs, lines)
    data = prepare_data(_config(dataset, alignments, bpe_dropout=0.5), str(tmp_path / "model"), workers=1, log=_quiet)
    sampled = data.train_tokens(0, seed=1)
    assert sampled.has_alignments and sampled.manifest["alignments_dropped_mismatch"] == 0
    source_lengths, target_lengths = sampled.lengths()
    _, _, gold = sampled.assemble(np.arange(80), 80, int(source_lengths.max()), int(target_lengths.max()))
    # Each target piece of a linked word takes every piece of its source words: a row's
    # sum is the number of source pieces of the words it is linked to, never 0 for a word.
    labelled = (gold.sum(axis=2) > 0).sum(axis=1)  # rows with a link, per pair
    assert (labelled >= 3).all()


def test_the_flag_names_the_file_in_the_data_configuration():
    plan = plan_prepare(parse_args(["--guided-alignment", "train.al"]))
    assert plan.data_config.alignments == "train.al"
    assert plan_prepare(parse_args(["--guided-alignment", "none"])).data_config.alignments is None
    assert plan_prepare(parse_args(["--guided-alignment", "eflomal"])).data_config.alignments == "eflomal"


def test_eflomal_aligns_train_once_and_the_preparation_reuses_it(tmp_path):
    pytest.importorskip("eflomal", reason="eflomal is optional: pip install -r requirements-alignment.txt")
    from data.eflomal_alignments import TRAIN_ALIGNMENTS

    pairs, _, _ = _corpus()
    pairs[1] = ("", "leer")
    dataset, _ = _write(tmp_path, pairs, [])
    config = _config(dataset, "eflomal")
    logged = []
    prepare_shards(config, str(tmp_path / "model"), workers=1, log=logged.append)
    path = tmp_path / "model" / "data" / TRAIN_ALIGNMENTS
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(pairs) and lines[1] == ""
    assert any(f"eflomal: aligning {len(pairs) - 1} pairs" in line for line in logged)
    train = ShardedPairs(str(tmp_path / "model" / "data"), "train")
    assert train.has_alignments and train.manifest["fingerprint"]["alignments_input"]["path"] == str(path)
    logged.clear()
    prepare_shards(config, str(tmp_path / "model"), workers=1, log=logged.append)
    assert not any("eflomal" in line or "again" in line for line in logged)


def test_the_bundled_multi30k_alignments_hold_one_line_of_links_within_each_train_pair():
    from data.corpora import bundled_alignments, multi30k_path
    from data.text_files import iter_lines, iter_parallel_lines
    from data.words import parse_pharaoh, words

    lines = list(iter_lines(bundled_alignments("multi30k", "en", "de")))
    pairs = list(iter_parallel_lines(multi30k_path("train", "en"), multi30k_path("train", "de")))
    assert len(lines) == len(pairs) == 29000
    linked_words = 0
    for line, (source, target) in zip(lines, pairs):
        links = parse_pharaoh(line, len(words(source)), len(words(target)))  # ValueError outside the words
        linked_words += len({j for _, j in links})
    # grow-diag-final-and links nearly every word of a caption: most target words have a link.
    assert linked_words > 0.9 * sum(len(words(target)) for _, target in pairs)
