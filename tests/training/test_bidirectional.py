"""Tests for bidirectional training: every pair also reversed in the first epochs, then
source to target only (`TrainConfig.bidirectional_fraction`)."""

import collections
import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from app.training.config import TrainConfig
from app.training.loop import train
from app.training.run_plan import RunPlan
from app.training.run_length import plan_bidirectional_epochs
from data.dataset import PreparedData
from data.pipeline import TokenizedPairs
from layers.special_tokens import END_ID, START_ID
from tests.training.helpers import small_model_config


def _pairs(sources, targets):
    """`TokenizedPairs` of id lists, markers included."""
    return TokenizedPairs(tf.ragged.constant(sources, tf.int32), tf.ragged.constant(targets, tf.int32))


def _rows(pairs):
    return list(zip(map(tuple, pairs.source.to_list()), map(tuple, pairs.target.to_list())))


def test_a_reversed_pair_reads_the_target_and_writes_the_source_with_markers_moved():
    pairs = _pairs([[7, 8, END_ID], [9, END_ID]], [[START_ID, 20, END_ID], [START_ID, 21, 22, 23, END_ID]])
    assert _rows(pairs.reversed()) == [
        ((20, END_ID), (START_ID, 7, 8, END_ID)),
        ((21, 22, 23, END_ID), (START_ID, 9, END_ID)),
    ]


def test_both_directions_are_the_pairs_then_their_reversals_minus_any_that_outgrow_max_length():
    # The second pair fits max_length 4 one way (source 4 ids, target 3) but not the
    # other: reversed, its target gains the start marker and is 5 ids long.
    pairs = _pairs([[7, 8, END_ID], [9, 10, 11, END_ID]], [[START_ID, 20, END_ID], [START_ID, 21, END_ID]])
    assert _rows(pairs.in_both_directions(max_length=4)) == _rows(pairs) + [((20, END_ID), (START_ID, 7, 8, END_ID))]
    assert len(pairs.in_both_directions(max_length=5)) == 4


def test_an_epoch_in_both_directions_batches_every_pair_each_way_exactly_once(small_data):
    forward = small_data.tokens["train"]
    both = small_data.train_tokens(epoch=2, seed=5, both_directions=True)
    assert collections.Counter(_rows(both)) == collections.Counter(_rows(forward) + _rows(forward.reversed()))
    # The same ids for every such epoch (without BPE-dropout), and the one-way epoch unchanged.
    assert both is small_data.train_tokens(epoch=7, seed=5, both_directions=True)
    assert small_data.train_tokens(epoch=2, seed=5) is forward

    rows = []
    for source, target in small_data.train_batches(epoch=2, seed=5, both_directions=True):
        for source_row, target_row in zip(source.numpy(), target.numpy()):
            if source_row[0] != 0:
                rows.append((tuple(source_row[source_row != 0]), tuple(target_row[target_row != 0])))
    assert collections.Counter(rows) == collections.Counter(_rows(both))


def _epochs_trained(small_data, tmp_path, monkeypatch, **fields):
    """Runs `train` and returns (log lines, [(epoch, both_directions)] of the epochs it asked for)."""
    asked = []
    train_batches = PreparedData.train_batches

    def recording(self, epoch, seed=0, skip=0, both_directions=False):
        asked.append((epoch, both_directions))
        return train_batches(self, epoch, seed, skip, both_directions)

    monkeypatch.setattr(PreparedData, "train_batches", recording)
    lines = []
    config = TrainConfig(warmup_steps=2, eval_every=0, checkpoint_every=1000, log_every=1000, seed=3, **fields)
    train(
        RunPlan(size="tiny", variant=None, model_dir=str(tmp_path), model_config=small_model_config(small_data),
                data_config=small_data.config, train_config=config),
        small_data, tf.distribute.get_strategy(), log=lines.append,
    )
    return lines, asked


@pytest.mark.slow
def test_the_first_whole_epochs_that_fit_the_fraction_train_both_ways(small_data, tmp_path, monkeypatch):
    both_epoch = len(small_data.train_plan(0, 3, both_directions=True))  # steps of one epoch both ways
    one_way = len(small_data.train_plan(0, 3))
    # A third of the run holds one epoch both ways and not two; two more epochs one way follow.
    steps = both_epoch + 2 * one_way
    fraction = (both_epoch + 1) / steps
    assert fraction * steps < 2 * both_epoch
    lines, asked = _epochs_trained(
        small_data, tmp_path, monkeypatch, train_steps=steps, bidirectional_fraction=fraction
    )
    assert asked == [(0, True), (1, False), (2, False)]
    assert (
        f"bidirectional training: the first epoch trains ({both_epoch:,} steps, {both_epoch / steps:.0%} of the "
        "run) on en->de and de->en together, the rest on en->de"
    ) in lines


@pytest.mark.slow
def test_a_fraction_shorter_than_one_epoch_both_ways_turns_it_off_and_says_so(small_data, tmp_path, monkeypatch):
    both_epoch = len(small_data.train_plan(0, 3, both_directions=True))
    lines, asked = _epochs_trained(
        small_data, tmp_path, monkeypatch, train_steps=both_epoch, bidirectional_fraction=0.5
    )
    assert len(asked) >= 2 and not any(both for _, both in asked)
    assert (
        f"bidirectional training off: one epoch of en->de and de->en is {both_epoch:,} steps, "
        f"more than 50% of the run's {both_epoch:,}"
    ) in lines


@pytest.mark.slow
def test_off_by_default_every_epoch_is_one_way(small_data, tmp_path, monkeypatch):
    lines, asked = _epochs_trained(small_data, tmp_path, monkeypatch, train_steps=3)
    assert asked == [(0, False)]
    assert not [line for line in lines if "bidirectional" in line]


@pytest.mark.parametrize("bad", [-0.1, 1.0, float("nan")])
def test_the_fraction_must_leave_some_of_the_run_one_way(bad):
    with pytest.raises(ValueError, match=r"bidirectional_fraction must be in \[0, 1\), got "):
        TrainConfig(train_steps=1, bidirectional_fraction=bad)


def test_the_number_of_epochs_rounds_down_to_whole_ones():
    class FakeData:
        config = dataclasses.make_dataclass("C", [("source_lang", str), ("target_lang", str)])("en", "fr")

        def train_plan(self, epoch, seed, both_directions=False):
            return np.zeros(100 if both_directions else 50)

    config = TrainConfig(train_steps=1000, bidirectional_fraction=0.35)
    lines = []
    assert plan_bidirectional_epochs(config, FakeData(), 1000, lines.append) == 3
    assert lines == [
        "bidirectional training: the first 3 epochs train (300 steps, 30% of the run) on en->fr and fr->en "
        "together, the rest on en->fr"
    ]
    accumulating = dataclasses.replace(config, accumulate=2)  # 50 updates an epoch both ways
    assert plan_bidirectional_epochs(accumulating, FakeData(), 1000, lines.append) == 7
