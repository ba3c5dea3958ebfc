"""Writes a corpus's token ids as plain numpy arrays, for the TensorFlow-free JAX tools.

The GPU machine this project is sometimes lent has JAX but no TensorFlow (nor
tensorflow-text, so the in-graph tokenizer cannot run there). This script runs here,
through the project's own data pipeline (`data.dataset.prepare_data`), and writes what
`train_jax.py` needs: the ids of every split exactly as training sees them, the
SentencePiece model (plain `sentencepiece` can detokenize with it), and the raw
validation references.

    python benchmarks/gpu/export_token_ids.py --vocab-size 8000 --output runs/gpu-data/en-de-8000
    python benchmarks/gpu/export_token_ids.py --source-lang en --target-lang fr --output runs/gpu-data/en-fr-8000

Output folder:
    ids.npz         {split}_{side}_ids int32 [total] and {split}_{side}_offsets int64 [N + 1]
                    for split in train/validation, side in source/target (markers included)
    subwords.model  the shared vocabulary
    validation.{source,target}.txt   raw text, one sentence a line: the validation pairs
                    of ids.npz, in its order (a pair longer than --max-length is in neither)
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from data.config import DEFAULT_MAX_LENGTH, DataConfig  # noqa: E402
from data.dataset import prepare_data  # noqa: E402
from data.pipeline import tokenize_pairs  # noqa: E402

SPLITS = ("train", "validation")


def ragged_to_flat(ragged):
    """A tf.RaggedTensor [N, None] as (values int32 [total], row offsets int64 [N + 1])."""
    return ragged.flat_values.numpy().astype(np.int32), ragged.row_splits.numpy().astype(np.int64)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="multi30k")
    parser.add_argument("--source-lang", default="en")
    parser.add_argument("--target-lang", default="de")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--max-length", type=int, default=DEFAULT_MAX_LENGTH, help="longest pair kept, in ids")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()

    os.makedirs(args.output, exist_ok=True)
    config = DataConfig(
        dataset=args.dataset,
        source_lang=args.source_lang,
        target_lang=args.target_lang,
        vocab_size=args.vocab_size,
        batch_tokens=4096,
        max_length=args.max_length,
    )
    # The vocabulary is trained into (or reused from) the output folder itself.
    data = prepare_data(config, args.output)
    arrays = {}
    for split in SPLITS:
        for side in ("source", "target"):
            values, offsets = ragged_to_flat(getattr(data.tokens[split], side))
            arrays[f"{split}_{side}_ids"] = values
            arrays[f"{split}_{side}_offsets"] = offsets
    np.savez_compressed(os.path.join(args.output, "ids.npz"), **arrays)
    # train_jax.py scores the translation of validation source i in ids.npz against line i
    # of the references: the text files hold the same pairs, the over-long ones left out.
    text = data.text["validation"]
    fits = tokenize_pairs(data.tokenizer, text).fits(config.max_length)
    for side, lines in (("source", text.source), ("target", text.target)):
        kept_lines = [line for line, keep in zip(lines, fits) if keep]
        with open(os.path.join(args.output, f"validation.{side}.txt"), "w", encoding="utf-8") as f:
            f.writelines(line.replace("\n", " ") + "\n" for line in kept_lines)
    kept = len(data.tokens["validation"])
    if kept != len(text):
        print(f"warning: {len(text) - kept} validation pairs are longer than --max-length {config.max_length}: "
              "left out of ids.npz and the validation text files, and so of BLEU")
    print(f"wrote {args.output}: train {len(data.tokens['train'])} pairs, validation {kept}")


if __name__ == "__main__":
    main()
