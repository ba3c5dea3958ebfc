"""benchmarks/gpu/train_jax.py: seeds trained side by side are each the run they would be alone.

The sweep stacks several seeds' variables and vmaps one training step over them. Each
seed must still train exactly as its own run would: the same updates from the same
batches, with its own dropout masks. Runs where JAX is installed (the GPU machines, or
`pip install jax`); skipped elsewhere, as CI is.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

GROUP_SCRIPT = textwrap.dedent(
    """
    import sys
    sys.argv = ["train_jax.py"]
    sys.path.insert(0, "benchmarks/gpu")
    import jax, keras, numpy as np
    import train_jax
    from app.model.config import ModelConfig
    from app.model.transformer import build_transformer

    config = ModelConfig.from_size("tiny", vocab_size=100, num_layers=1)
    states = []
    for seed in (1, 2):
        keras.utils.set_random_seed(seed)
        model = build_transformer(config)
        optimizer = keras.optimizers.Adam(1e-3, weight_decay=0.2)
        optimizer.build(model.trainable_variables)
        states.append(([v.value for v in model.trainable_variables], [v.value for v in model.non_trainable_variables],
                       [v.value for v in optimizer.variables]))
        if seed == 1:
            step = train_jax.make_train_step(model, optimizer, 0.1)
    rng = np.random.default_rng(0)
    source = rng.integers(3, 100, (2, 4, 7)).astype(np.int32)
    target = rng.integers(3, 100, (2, 4, 8)).astype(np.int32)
    target[:, :, 0] = 1
    group, group_losses = train_jax.stacked(states), []
    for _ in range(2):  # two steps: the second one's dropout masks come from advanced seed states
        group, loss, _ = jax.jit(jax.vmap(step))(group, source, target)
        group_losses.append(np.asarray(loss))
    for index in (0, 1):
        alone = states[index]
        for number in range(2):
            alone, loss, _ = jax.jit(step)(alone, source[index], target[index])
            print("loss", float(loss), float(group_losses[number][index]))
        leaves = zip(jax.tree_util.tree_leaves(alone), jax.tree_util.tree_leaves(train_jax.member(group, index)))
        print("state", max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in leaves))
    """
)


def test_each_seed_of_a_group_trains_as_it_would_alone():
    pytest.importorskip("jax")
    environment = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(ROOT)}
    output = subprocess.run([sys.executable, "-c", GROUP_SCRIPT], env=environment, cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert output.returncode == 0, output.stderr[-3000:]
    lines = [line.split() for line in output.stdout.splitlines() if line.startswith(("loss", "state"))]
    losses = [(float(alone), float(grouped)) for kind, alone, grouped in (l for l in lines if l[0] == "loss")]
    assert len(losses) == 4
    # Loss sums over the batch's tokens (~28 tokens at ~4.6 each): float32 reduction order.
    for alone, grouped in losses:
        assert grouped == pytest.approx(alone, rel=1e-5)
    # Two seeds differ: their losses are not the same numbers.
    assert losses[0][0] != losses[2][0]
    states = [float(line[1]) for line in lines if line[0] == "state"]
    assert len(states) == 2 and max(states) < 1e-4
