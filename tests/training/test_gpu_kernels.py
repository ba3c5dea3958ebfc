"""Every op of the training steps, the validation and the export has a GPU kernel.

An op without a GPU kernel for its dtypes does not fail on a GPU: soft placement runs it
on the host, and its inputs and outputs cross the bus each time, several times a step
inside a loop body. Nothing but a profile would show it, so this looks for such ops
before a GPU runs them. TensorFlow's kernel registry answers without a GPU: the pip
`tensorflow` wheel for Linux registers its CUDA kernels on any machine.

The graphs are traced as `python train.py --size base` builds them: its recipe and flags
(the fused loss, no gradient accumulation, no XLA), in each precision, under the
MirroredStrategy it uses on GPUs (here over one CPU device: the all-reduce of several GPUs
is not traced), with the base model's options at a small width and depth: the ops are
those of base, fewer and smaller. The export's graphs are its signatures' concrete
functions, which TF Serving runs.
"""

import functools

import pytest
import tensorflow as tf
from tensorflow.python.framework import kernels, op_def_registry

from app.cli.flags import model_config_from_args
from app.decoding.model_search import greedy_ids
from app.model_dir import checkpoints
from app.model.transformer import Transformer, build_transformer
from app.commands.train_plan import train_config_from_args
from app.training.optimizer import make_optimizer
from app.training.precision import PRECISIONS
from app.training.step import distribute, make_eval_step, make_train_steps

# The kernels a GPU runs: CUDA's, and DEFAULT, those TensorFlow falls back on for a device
# that registers none of its own (among them integer ops it keeps in host memory on a GPU).
GPU_DEVICE_TYPES = ("GPU", "DEFAULT")

# Ops of the export that run on the host by design, by name or by name and dtypes as
# `ops_without_gpu_kernel` writes them. TF Serving places an op that has no GPU kernel on
# the CPU; these are the tokenizer's, around the model, never inside the decoding loop.
# Ops on strings are host-side too, by rule (`_on_strings`): no GPU kernel takes strings.
HOST_SIDE = {
    # TF-Text's SentencePiece ops, the tokenizer and detokenizer: CPU kernels only.
    "SentencepieceOp": "the tokenizer's model, a resource the two ops below share",
    "SentencepieceTokenizeOp": "strings to ragged subword ids",
    "SentencepieceDetokenizeOp": "subword ids to strings",
    "StaticRegexReplace": "the detokenizer's strings put on one line",
    # The tokenizer's ragged output (int64 row splits) made into the `[B, S]` source ids.
    "RaggedRange": "ragged slicing of the tokenized inputs to the model's length",
    "RaggedGather": "ragged slicing of the tokenized inputs to the model's length",
    "RaggedTensorToTensor": "the ragged ids padded to `[B, S]`, the model's input",
    "Fill(T=int32, index_type=int64)": "the `[B, 1]` end-token column, sized by the ragged ids' int64 row count",
    # The constrained signature's phrases: each sentence's constraints split at tabs.
    "StringSplitV2": "the constraints split into phrases at tabs",
    "StringStrip": "each phrase's surrounding white space taken off",
    "DenseBincount(T=int64, Tidx=int32)": "the split phrases' ragged rows counted (int64 row ids)",
    # The align signature's words, after the search: each piece's place in the text, and
    # the links written as Pharaoh lines.
    "SentencepieceTokenizeWithOffsetsOp": "strings to subword ids with each piece's byte offsets",
    "UnicodeDecodeWithOffsets": "each character's code point and first byte, for the word it is in",
    "AsString": "the links' word indices written as text",
    "StringJoin": "each link written `i-j`",
    "UnsortedSegmentJoin": "a sentence's links joined into its Pharaoh line",
}

SMALL_BASE = ["--size", "base", "--num-layers", "1", "--d-model", "32", "--d-ff", "64", "--num-heads", "2"]
VOCAB_SIZE = 300


def gpu_kernels_registered():
    return any(kernel.device_type == "GPU" for kernel in kernels.get_registered_kernels_for_op("MatMul").kernel)


pytestmark = pytest.mark.skipif(
    not gpu_kernels_registered(), reason="this TensorFlow build registers no GPU kernels (not the Linux pip wheel)"
)


def ops_without_gpu_kernel(graph_def):
    """`{"Op(attr=dtype, ...)": [where, ...]}` for each op of `graph_def` that no GPU kernel
    takes with its dtypes, where being "graph" or the name of a library function (loop and
    cond bodies, nested `tf.function`s, custom gradients: a traced graph's library holds
    every function it calls, however deeply). Calls of library functions are not ops."""
    functions = {function.signature.name for function in graph_def.library.function}
    bodies = [("graph", graph_def.node)] + [(f.signature.name, f.node_def) for f in graph_def.library.function]
    found = {}
    for where, nodes in bodies:
        for node in nodes:
            if node.op in functions:
                continue
            if not any(_kernel_takes(kernel, node) for kernel in _gpu_kernels(node.op)):
                found.setdefault(_signature(node), []).append(where)
    return found


def host_side(signature):
    """Whether an op `ops_without_gpu_kernel` found is one `HOST_SIDE` or the string rule allows."""
    return signature in HOST_SIDE or signature.split("(")[0] in HOST_SIDE or _on_strings(signature)


def _on_strings(signature):
    return "=string" in signature


@functools.lru_cache(maxsize=None)
def _gpu_kernels(op):
    """The GPU kernels of `op`, read once per op: the registry answers with a proto of all."""
    return [k for k in kernels.get_registered_kernels_for_op(op).kernel if k.device_type in GPU_DEVICE_TYPES]


def _kernel_takes(kernel, node):
    """Whether every constraint of `kernel` admits `node`'s attribute values: dtypes, and
    strings (GatherNd's kernels name the `bad_indices_policy` values they take)."""
    for constraint in kernel.constraint:
        value = _attr(node, constraint.name)
        allowed = constraint.allowed_values.list.type
        if value is None:
            return False
        if constraint.allowed_values.list.s:
            if value.s not in constraint.allowed_values.list.s:
                return False
        elif value.HasField("list"):
            if not all(dtype in allowed for dtype in value.list.type):
                return False
        elif value.type not in allowed:
            return False
    return True


def _attr(node, name):
    """The node's value of attribute `name`, or its op's default (traced nodes may leave it out)."""
    if name in node.attr:
        return node.attr[name]
    op_def = op_def_registry.get(node.op)
    defaults = {a.name: a.default_value for a in op_def.attr if a.HasField("default_value")} if op_def else {}
    return defaults.get(name)


def _signature(node):
    """"Op(attr=dtype, ...)" of the node's dtype attributes, names sorted."""
    dtypes = []
    for name, value in sorted(node.attr.items()):
        if value.HasField("type"):
            dtypes.append(f"{name}={tf.dtypes.as_dtype(value.type).name}")
        elif value.HasField("list") and value.list.type:
            dtypes.append(f"{name}=[{','.join(tf.dtypes.as_dtype(t).name for t in value.list.type)}]")
    return f"{node.op}({', '.join(dtypes)})"


def described(found):
    return "\n".join(f"{signature} in {', '.join(sorted(set(where)))}" for signature, where in sorted(found.items()))


# The check itself, on the offender it was written for.


def test_the_check_finds_a_bfloat16_scatter_inside_a_loop_inside_a_nested_function():
    @tf.function
    def inner(x):
        positions = tf.constant([[0, 1]])
        return tf.while_loop(
            lambda i, x: i < 2, lambda i, x: (i + 1, tf.tensor_scatter_nd_update(x, positions, x[0, :1])), (0, x)
        )[1]

    @tf.function
    def outer(x):
        return inner(x) * 2

    def found_for(dtype):
        return ops_without_gpu_kernel(outer.get_concrete_function(tf.TensorSpec([2, 3], dtype)).graph.as_graph_def())

    bfloat16 = found_for(tf.bfloat16)
    assert list(bfloat16) == ["TensorScatterUpdate(T=bfloat16, Tindices=int32)"]
    assert bfloat16["TensorScatterUpdate(T=bfloat16, Tindices=int32)"][0].startswith("while_body")
    assert found_for(tf.float32) == {}


def test_the_check_reads_the_string_constraints_of_a_kernel():
    # GatherNd's GPU kernels constrain the string `bad_indices_policy` as well as the dtypes.
    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.int32), tf.TensorSpec([None, 3], tf.int32)])
    def gathered(ids, where):
        return tf.gather_nd(ids, where[:, :2])

    assert ops_without_gpu_kernel(gathered.get_concrete_function().graph.as_graph_def()) == {}


def test_the_check_reports_an_op_on_strings_and_the_allowlist_takes_only_what_it_names():
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def lengths(texts):
        return tf.strings.length(texts) + 1

    found = ops_without_gpu_kernel(lengths.get_concrete_function().graph.as_graph_def())
    assert list(found) == ["StringLength()"]
    assert not host_side("StringLength()")  # An op on strings without a string dtype attribute.
    assert host_side("Reshape(T=string, Tshape=int32)") and host_side("SentencepieceOp()")
    assert host_side("Fill(T=int32, index_type=int64)") and not host_side("Fill(T=float32, index_type=int64)")


# The graphs training and the export run.


def base_run(precision, vocab_size=VOCAB_SIZE):
    """The model and `TrainConfig` that `python train.py --size base --precision PRECISION`
    would train, at a small width, depth and vocabulary."""
    import train

    args = train.parse_args(SMALL_BASE + ["--precision", precision])
    return model_config_from_args(args, vocab_size=vocab_size), train_config_from_args(args)


@pytest.fixture
def policy():
    """Sets Keras's global dtype policy, as the training loop does, and restores float32."""
    import keras

    yield keras.config.set_dtype_policy
    keras.config.set_dtype_policy("float32")


def traced_steps(precision):
    """The graphs of the training steps and the validation step, built as `app.training.loop`
    builds them, under the MirroredStrategy that every GPU machine trains with."""
    model_config, train_config = base_run(precision)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    steps = train_config.train_steps
    progress = checkpoints.Progress(steps, train_config.resolved_cooldown(steps))
    with strategy.scope():
        model = build_transformer(model_config)
        optimizer = make_optimizer(model_config, train_config, steps, progress)
        optimizer.build(model.trainable_variables)
    train_steps = make_train_steps(
        model, optimizer, strategy, train_config.label_smoothing, train_config.accumulate, train_config.jit,
        progress=progress,
    )
    # Batches of every shape, as the loop's: (source int32 [B, S], target int32 [B, T]).
    batches = tf.data.Dataset.range(2).map(lambda i: (tf.zeros([2, i + 3], tf.int32), tf.zeros([2, i + 4], tf.int32)))
    batches = distribute(strategy, batches)
    eval_step = make_eval_step(model, strategy, train_config.label_smoothing, batches.element_spec)
    # Validation BLEU's decoding, in the training precision (app.training.validation; its
    # detokenizer is the tokenizer's, on the host).
    transformer = Transformer(model, model_config)
    greedy = tf.function(lambda source: greedy_ids(transformer, source)[0])
    return {
        "training steps": train_steps.get_concrete_function(iter(batches), tf.constant(2)).graph.as_graph_def(),
        "validation step": eval_step.get_concrete_function().graph.as_graph_def(),
        "validation decoding": greedy.get_concrete_function(tf.TensorSpec([None, None], tf.int32)).graph.as_graph_def(),
    }


def test_the_base_recipe_traces_the_fused_loss_without_xla():
    """What the graphs below cover: the recipe's options, not another path."""
    _, train_config = base_run("float32")
    assert (train_config.accumulate, train_config.jit) == (1, False)


@pytest.mark.slow
@pytest.mark.parametrize("precision", PRECISIONS)
def test_every_op_of_the_training_steps_and_the_validation_has_a_gpu_kernel(precision, policy):
    policy(precision)
    graphs = traced_steps(precision)
    # The fused loss's loop over slices, with its softmax, is in the training steps' library:
    # the walk reaches into it.
    assert any(node.op == "Softmax" for f in graphs["training steps"].library.function for node in f.node_def)
    for name, graph_def in graphs.items():
        found = ops_without_gpu_kernel(graph_def)
        assert not found, f"{name} in {precision}, ops without a GPU kernel:\n{described(found)}"


@pytest.mark.slow
def test_every_op_of_the_export_has_a_gpu_kernel_but_the_tokenizers(tmp_path):
    from app.export.saved_model import Translator
    from data.tokenizer import SubwordTokenizer
    from tests.tiny_run import write_multi30k_slice

    source, target = write_multi30k_slice(tmp_path, train=200, validation=1)[:2]
    texts = [line for path in (source, target) for line in open(path, encoding="utf-8")]
    tokenizer = SubwordTokenizer.train(texts, 400, str(tmp_path / "vocab.model"))
    model_config, _ = base_run("float32", tokenizer.vocab_size)
    translator = Translator(build_transformer(model_config), model_config, tokenizer)
    functions = translator.concrete_signatures()
    functions["source_lengths"] = translator.source_lengths.get_concrete_function()
    # Beam search's loop is in the library: the walk reaches into it.
    beam_search = functions["serving_default"].graph.as_graph_def().library.function
    assert any(f.signature.name.startswith("while_body") for f in beam_search)
    allowed_seen = set()
    for name, function in functions.items():
        found = ops_without_gpu_kernel(function.graph.as_graph_def())
        offenders = {signature: where for signature, where in found.items() if not host_side(signature)}
        assert not offenders, f"{name}, ops without a GPU kernel:\n{described(offenders)}"
        allowed_seen.update(s if s in HOST_SIDE else s.split("(")[0] for s in found if not _on_strings(s))
    # No entry outlives the op it allowed.
    assert allowed_seen == set(HOST_SIDE)
