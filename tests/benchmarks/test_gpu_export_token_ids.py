"""benchmarks/gpu/export_token_ids.py: its validation text lines up with its ids.

train_jax.py (on a GPU machine without TensorFlow) scores the translation of validation
source i in ids.npz against line i of validation.target.txt, so the two must hold the
same pairs in the same order, over-long pairs left out of both.
"""

import sys
from pathlib import Path

import numpy as np
import sentencepiece

from tests.training.test_multi_worker import write_corpus

def test_the_validation_references_are_the_pairs_of_the_ids_in_their_order(tmp_path, monkeypatch, capsys):
    dataset = write_corpus(tmp_path)  # 20 validation pairs of 3-12 words
    paths = dataset.removeprefix("files:").split(",")
    sources = Path(paths[2]).read_text(encoding="utf-8").splitlines()
    targets = Path(paths[3]).read_text(encoding="utf-8").splitlines()
    # Pair 2 made longer than --max-length 96 allows, on the target side only.
    targets[2] = " ".join(["wasser"] * 100)
    Path(paths[3]).write_text("".join(line + "\n" for line in targets), encoding="utf-8")
    output = tmp_path / "ids"
    # In this process, which has TensorFlow already: a process of its own would import it again.
    from benchmarks.gpu import export_token_ids

    flags = ["--dataset", dataset, "--vocab-size", "300", "--max-length", "96", "--output", str(output)]
    monkeypatch.setattr(sys, "argv", ["export_token_ids.py", *flags])
    export_token_ids.main()
    assert (
        "warning: 1 validation pairs are longer than --max-length 96: left out of ids.npz and the validation "
        "text files, and so of BLEU"
    ) in capsys.readouterr().out.splitlines()
    kept = [i for i in range(20) if i != 2]
    assert (output / "validation.source.txt").read_text(encoding="utf-8").splitlines() == [sources[i] for i in kept]
    assert (output / "validation.target.txt").read_text(encoding="utf-8").splitlines() == [targets[i] for i in kept]
    # Line i of the text is pair i of the ids: the source ids decode to the source line.
    arrays = np.load(output / "ids.npz")
    ids, offsets = arrays["validation_source_ids"], arrays["validation_source_offsets"]
    vocabulary = sentencepiece.SentencePieceProcessor(model_file=str(output / "subwords.model"))
    decoded = [vocabulary.decode([int(i) for i in ids[start:end] if i > 3]) for start, end in zip(offsets, offsets[1:])]
    assert decoded == [sources[i] for i in kept]
