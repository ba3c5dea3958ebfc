"""What `python train.py --dry-run` prints: counts, vocabulary and batching figures.

    summary = summarize(data)        # a plain dict, also fit for JSON
    print("\\n".join(format_summary(summary)))
"""

from typing import List

import numpy as np

from data.buckets import BatchPlan
from data.dataset import PreparedData
from data.pipeline import TokenizedPairs


def padding_efficiency(pairs: TokenizedPairs, plan: BatchPlan) -> float:
    """Non-padding ids / all ids in the plan's batches, source and target counted."""
    source_lengths, target_lengths = pairs.lengths()
    real = source_lengths.sum() + target_lengths.sum()
    rows = plan.rows.astype(np.int64)
    total = int(np.sum(rows * plan.source_lengths) + np.sum(rows * plan.target_lengths))
    return float(real / total) if total else 0.0


def summarize(data: PreparedData) -> dict:
    """Per-split pair counts, vocabulary size and training batch figures for one epoch."""
    # Epoch 0 as trained: with BPE-dropout its ids differ from tokens["train"].
    train = data.train_tokens(epoch=0)
    plan = data.train_plan(epoch=0)
    source_lengths, target_lengths = train.lengths()
    splits = {
        split: {
            "read": counts.read,
            "kept": counts.kept,
            "dropped_empty": counts.dropped_empty,
            "dropped_too_long": counts.dropped_too_long,
        }
        for split, counts in data.counts.items()
    }
    train_manifest = getattr(data.tokens["train"], "manifest", {})
    alignments = None
    if train_manifest.get("alignments"):
        alignments = {
            "source": data.config.alignments, "dropped_mismatch": train_manifest["alignments_dropped_mismatch"],
        }
    return {
        "dataset": data.config.dataset,
        "source_lang": data.config.source_lang,
        "target_lang": data.config.target_lang,
        "vocab_size": data.tokenizer.vocab_size,
        "lowercase": data.tokenizer.lowercase,
        "max_length": data.config.max_length,
        "batch_tokens": data.config.batch_tokens,
        "num_replicas": data.scheme.num_replicas,
        "splits": splits,
        "validation_note": data.validation_note,
        # Train's gold word alignments (guided alignment training), or None.
        "alignments": alignments,
        "train_batches_per_epoch": len(plan),
        "mean_source_tokens_per_batch": float(source_lengths.sum() / len(plan)),
        "mean_target_tokens_per_batch": float(target_lengths.sum() / len(plan)),
        "padding_efficiency": padding_efficiency(train, plan),
        "train_batch_shapes": len(
            set(zip(plan.rows.tolist(), plan.source_lengths.tolist(), plan.target_lengths.tolist()))
        ),
        "declared_batch_shapes": len(data.batch_shapes()),
        "validation_batches": len(data.eval_plan("validation")),
    }


def format_summary(summary: dict) -> List[str]:
    """`summarize`'s dict as aligned, human-readable lines."""
    lines = [
        f"data: {summary['dataset']} {summary['source_lang']}->{summary['target_lang']}, "
        f"vocabulary {summary['vocab_size']} subwords"
        + (" of lowercased text" if summary.get("lowercase") else "")
        + f", max length {summary['max_length']}",
    ]
    for split, counts in summary["splits"].items():
        lines.append(
            f"  {split:<10} {counts['kept']:>9,} pairs kept of {counts['read']:,} "
            f"(dropped: {counts['dropped_empty']:,} empty, "
            f"{counts['dropped_too_long']:,} too long)"
        )
    if summary["validation_note"]:
        lines.append(f"  validation: {summary['validation_note']}")
    if summary.get("alignments"):
        alignments = summary["alignments"]
        lines.append(
            f"  alignments of train: {alignments['source']}; {alignments['dropped_mismatch']:,} pairs without links "
            "(their pieces do not mark their words)"
        )
    lines += [
        f"batches: {summary['batch_tokens']:,} tokens per batch over "
        f"{summary['num_replicas']} replica(s); {summary['train_batches_per_epoch']:,} "
        f"training batches per epoch, {summary['validation_batches']:,} validation",
        f"  mean non-padding tokens per batch: {summary['mean_source_tokens_per_batch']:,.0f} "
        f"source, {summary['mean_target_tokens_per_batch']:,.0f} target",
        f"  padding efficiency: {summary['padding_efficiency']:.3f}",
        f"  batch shapes: {summary['train_batch_shapes']} per epoch, "
        f"{summary['declared_batch_shapes']} possible",
    ]
    return lines
