"""Word alignments and markup: every cross-attention head's AER against a proxy, BLEU of an
unguided and a guided run, tags kept through translation, and the `align` signature's speed.

    python benchmarks/bench_alignment.py --unguided runs/tiny-multi30k-en-de --guided runs/tiny-guided \\
        --saved-model saved_models/translator
    python benchmarks/bench_alignment.py --unguided RUN --sentences 200 --rounds 1          # a quick look

On the bundled Multi30k (en-de: validation and test_2016_flickr). Each part prints a markdown
table; a part whose input is not given is left out (no --guided: no guided rows; no
--saved-model: no markup through `align` and no speed).

1. **Proxy.** No gold German-English word alignments are available here, so the reference
   alignments are a proxy: eflomal 2.0.0 both ways over the words (data/words.py) of the
   train, validation and test_2016_flickr pairs, joined by grow-diag-final-and
   (data/eflomal_alignments.py). eflomal draws from the system's random source and takes
   minutes, so the proxy is kept (`--proxy-cache`, by default under the temporary directory,
   named by the corpus's content hash) and read again while the corpus and eflomal's version
   are the same. `--proxy FILE` gives the Pharaoh lines of validation then test_2016_flickr
   instead (one line per pair).
2. **AER** of each run (`--unguided`, `--guided`: training runs' directories, their weights as
   `python -m app.evaluate --model-dir` loads them): for every decoder layer and each head of
   it and the layer's mean, the references aligned as the `align` signature aligns a
   translation (a teacher-forced pass over the reference, pieces lifted to words by
   `app.decoding.alignment.word_links`), against the proxy. The proxy serves as both sure and
   possible links: AER = 1 - 2|A∩S| / (|A| + |S|), summed over the corpus (1 - F1). One pass
   a batch reads every layer's heads. ★ marks the best head on validation; its test AER is
   the figure to report; "default" marks the head the run's exports read unless told another
   (`app.decoding.config.chosen_alignment_head`).
3. **BLEU** of each run on test_2016_flickr, translated in memory at the default decoding
   settings (`python -m app.evaluate --model-dir`'s path), and of the export's
   `serving_default` where given: sacreBLEU lowercased and lc.norm.tok
   (app/evaluation/metrics.py); p: the paired bootstrap (app/evaluation/significance.py) of
   each row against the unguided run, the share of resamples in which the lower of the two
   scores at least the higher's lowercased BLEU (p <= 0.05: significantly different).
4. **Markup** on test_2016_flickr: one `<b>...</b>` pair around a source phrase of one to
   three words whose proxy-aligned reference words are non-empty and contiguous, drawn with
   `random.Random(seed + index)` (sentences without such a phrase are counted). (a) Through
   the export's `align` signature and `data.markup.translate_markup`: the shares of outputs
   well-formed (data.markup's parser and an html.parser stack check), holding every tag
   exactly once, and whose plain text is the export's plain translation (`serving_default`).
   (b) Through forced alignment of the reference (the export's `align_targets`, and each run
   at its default and its ★ head): the share whose tag encloses exactly the proxy-aligned
   reference words, and the mean word IoU.
5. **Speed** of the export's `align` and `serving_default` at batch `--batch-size`, the two
   taking turns chunk by chunk (`--chunk-sentences`) so that a shared machine's drift falls
   on both alike: sentences per second, the median over `--rounds` rounds, and align's speed
   over serving_default's (the goal: at least 0.9x). One thread per op, `--threads` ops at once.
"""

import argparse
import collections
import gzip
import hashlib
import html
import html.parser
import importlib.metadata
import json
import os
import random
import re
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

from benchmarks import machine  # noqa: E402
from app.cli.flag_types import positive_int  # noqa: E402
from data.corpora import MULTI30K_SCORED_SPLITS, multi30k_path, read_multi30k_lines  # noqa: E402
from data.words import parse_pharaoh, word_spans, words  # noqa: E402

# The proxy is trained on these; AER is measured on the last two.
PROXY_SPLITS = ("train", "validation", "test_2016_flickr")
SCORED_SPLITS = MULTI30K_SCORED_SPLITS
TEST = "test_2016_flickr"
SOURCE_LANG, TARGET_LANG = "en", "de"
LANGUAGE_NAMES = {"en": "English", "de": "German", "fr": "French"}
# A tagged source phrase is one to this many words.
LONGEST_TAGGED = 3
OPEN, CLOSE = "<b>", "</b>"
PROXY_CACHE_FORMAT = 1
BEST, DEFAULT = "★", "default"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--unguided", required=True, metavar="RUN_DIR", help="a training run without alignment guidance"
    )
    parser.add_argument(
        "--guided", metavar="RUN_DIR", help="a training run with guided alignment (default: none, no guided rows)"
    )
    parser.add_argument(
        "--saved-model", metavar="DIR",
        help="an export with the align signature, a version or its base (newest version) "
        "(default: none, no markup through align and no speed)",
    )
    proxy = parser.add_mutually_exclusive_group()
    proxy.add_argument(
        "--proxy", metavar="FILE",
        help="Pharaoh lines of the reference alignments, one per pair of validation then test_2016_flickr "
        "(default: eflomal's, made or read from --proxy-cache)",
    )
    proxy.add_argument(
        "--proxy-cache", metavar="FILE",
        help="where eflomal's proxy is kept and read again while the corpus is the same "
        "(default: bench_alignment/proxy-HASH.json under the temporary directory)",
    )
    parser.add_argument(
        "--sentences", type=positive_int,
        help="the first N sentences of validation and of test_2016_flickr only (default: all)",
    )
    parser.add_argument("--batch-size", type=positive_int, default=64, help="sentences a call (default 64)")
    parser.add_argument("--rounds", type=positive_int, default=3, help="timed rounds of the speed part (default 3)")
    parser.add_argument(
        "--chunk-sentences", type=positive_int, default=128,
        help="sentences each signature translates before the other takes its turn (default 128)",
    )
    parser.add_argument("--threads", type=positive_int, default=2, help="TensorFlow's ops at once (default 2)")
    parser.add_argument("--seed", type=int, default=1, help="the draw of tagged phrases (default 1)")
    return parser.parse_args(argv)


# The corpus and the proxy.


def corpus_hash(splits=PROXY_SPLITS, langs=(SOURCE_LANG, TARGET_LANG)):
    """sha256 of the text of the proxy's corpus: each file's name and decompressed bytes."""
    digest = hashlib.sha256()
    for split in splits:
        for lang in langs:
            path = multi30k_path(split, lang)
            with gzip.open(path, "rb") as f:
                data = f.read()
            name = os.path.basename(path).removesuffix(".gz")  # e.g. val.en
            digest.update(f"{name}\0{len(data)}\0".encode() + data)
    return digest.hexdigest()


def proxy_key():
    """What eflomal's proxy is made from: the cache holds it only while this is the same."""
    try:
        version = importlib.metadata.version("eflomal")
    except importlib.metadata.PackageNotFoundError:
        version = None
    return {
        "format": PROXY_CACHE_FORMAT, "corpus_sha256": corpus_hash(), "splits": list(PROXY_SPLITS),
        "source_lang": SOURCE_LANG, "target_lang": TARGET_LANG, "eflomal": version,
        "symmetrization": "grow-diag-final-and",
    }


def default_proxy_cache(key):
    return os.path.join(tempfile.gettempdir(), "bench_alignment", f"proxy-{key['corpus_sha256'][:16]}.json")


def corpus_splits():
    """`{split: (sources, references)}`: every pair of the proxy's splits."""
    return {
        split: tuple(read_multi30k_lines(split, lang) for lang in (SOURCE_LANG, TARGET_LANG)) for split in PROXY_SPLITS
    }


def made_proxy(cache, key, splits, log=print):
    """eflomal's proxy of a corpus: `{"validation": lines, "test_2016_flickr": lines,
    "pairs", "links", "seconds", "key", "cache", "made_now"}`, read from `cache` where it
    holds the same `key`, else made (minutes for Multi30k) and written there.

    Args:
        cache: the file.
        key: what the proxy is made from (`proxy_key`).
        splits: `{split: (sources, references)}` of `PROXY_SPLITS` (`corpus_splits`), all
            aligned together; only the lines of `SCORED_SPLITS` are kept.
        log: where a line about the work goes.
    """
    from data.atomic_files import write_atomically
    from data.eflomal_alignments import align_corpus

    try:
        with open(cache, encoding="utf-8") as f:
            kept = json.load(f)
        if kept.get("key") == key:
            kept["cache"], kept["made_now"] = cache, False
            return kept
        log(f"proxy: {cache} was made from another corpus or eflomal; making it again")
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as error:
        log(f"proxy: {cache} cannot be read ({error}); making it again")
    if key.get("eflomal") is None:
        raise SystemExit("the proxy needs eflomal: pip install -r requirements-alignment.txt, or give --proxy FILE")
    sources, targets = [], []
    for split in PROXY_SPLITS:
        sources += splits[split][0]
        targets += splits[split][1]
    started = time.monotonic()
    lines = align_corpus(sources, targets, log=lambda line: log("proxy: " + line))
    seconds = time.monotonic() - started
    proxy = {"key": key, "pairs": len(lines), "links": sum(len(line.split()) for line in lines), "seconds": seconds}
    start = 0
    for split in PROXY_SPLITS:
        count = len(splits[split][0])
        if split in SCORED_SPLITS:
            proxy[split] = lines[start : start + count]
        start += count
    os.makedirs(os.path.dirname(os.path.abspath(cache)), exist_ok=True)
    write_atomically(cache, json.dumps(proxy))
    proxy["cache"], proxy["made_now"] = cache, True
    return proxy


def read_proxy_file(path, sides):
    """`{split: lines}` of a `--proxy` file: one Pharaoh line per pair of validation, then
    of test_2016_flickr, each checked against the pair's words.

    Args:
        sides: `{split: (sources, references)}`, every pair of each split.

    Raises:
        SystemExit naming the file, the line and what is wrong.
    """
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    expected = sum(len(sides[split][0]) for split in SCORED_SPLITS)
    if len(lines) != expected:
        raise SystemExit(
            f"--proxy {path}: {len(lines)} lines, but validation and test_2016_flickr have {expected} pairs "
            "(one line per pair, validation first)"
        )
    result, start = {}, 0
    for split in SCORED_SPLITS:
        sources, references = sides[split]
        result[split] = lines[start : start + len(sources)]
        for k, (line, source, reference) in enumerate(zip(result[split], sources, references)):
            try:
                parse_pharaoh(line, len(words(source)), len(words(reference)))
            except ValueError as error:
                raise SystemExit(f"--proxy {path}:{start + k + 1}: {error}") from None
        start += len(sources)
    return result


def links_of(line):
    """The set of `(i, j)` of a Pharaoh line."""
    return {(int(i), int(j)) for i, _, j in (link.partition("-") for link in line.split())}


# Alignment error rate.


def aer(predicted, sure):
    """The alignment error rate of `predicted` links against `sure` ones, which serve as the
    possible links too: 1 - 2|A∩S| / (|A| + |S|), each count summed over the corpus.

    Args:
        predicted, sure: one set of `(i, j)` per sentence each, in the same order.

    Returns:
        A float in [0, 1]; 0.0 where neither side has a link.
    """
    if len(predicted) != len(sure):
        raise ValueError(f"{len(predicted)} predicted sentences against {len(sure)} reference ones")
    both = sum(len(a & s) for a, s in zip(predicted, sure))
    total = sum(len(a) + len(s) for a, s in zip(predicted, sure))
    return 1.0 - 2.0 * both / total if total else 0.0


# Tags placed on the source.


def aligned_words(links, span):
    """The target words linked to any source word of `span` = `(a, b)`, sorted."""
    a, b = span
    return sorted({j for i, j in links if a <= i < b})


def tag_candidates(links, source_words):
    """The source phrases `(a, b)` of 1 to `LONGEST_TAGGED` words whose aligned target words
    (`links`, the proxy's) are non-empty and contiguous, by start then end."""
    candidates = []
    for a in range(source_words):
        for b in range(a + 1, min(a + LONGEST_TAGGED, source_words) + 1):
            targets = aligned_words(links, (a, b))
            if targets and targets[-1] - targets[0] + 1 == len(targets):
                candidates.append((a, b))
    return candidates


def draw_tag(links, source_words, seed, index):
    """The phrase sentence `index` tags: one of `tag_candidates`, drawn with
    `random.Random(seed + index)`; None where there is none."""
    candidates = tag_candidates(links, source_words)
    return random.Random(seed + index).choice(candidates) if candidates else None


def tagged(source, span):
    """`source` as markup, `OPEN`/`CLOSE` around its words `span` = `(a, b)`; the text escaped,
    so that the markup's plain text is `source`."""
    spans = word_spans(source)
    start, end = spans[span[0]][0], spans[span[1] - 1][1]
    return (
        html.escape(source[:start], quote=False) + OPEN + html.escape(source[start:end], quote=False) + CLOSE
        + html.escape(source[end:], quote=False)
    )


_TAG = re.compile(r"<[^<>]*>")


def tags_of(markup):
    """A Counter of the tags of `markup` as written (words are escaped: no `<` is text)."""
    return collections.Counter(_TAG.findall(markup))


class _StackCheck(html.parser.HTMLParser):
    """html.parser's reading of a line: whether its tags nest and all close."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.ok = [], True

    def handle_starttag(self, tag, attrs):
        self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack.pop() != tag:
            self.ok = False


def well_formed(markup):
    """Whether data.markup's parser accepts `markup` and html.parser finds its tags nested
    and closed."""
    from data.markup import MarkupError, strip

    try:
        strip(markup)
    except MarkupError:
        return False
    checker = _StackCheck()
    checker.feed(markup)
    checker.close()
    return checker.ok and not checker.stack


def enclosed_words(output):
    """`(start, end)`: the target words between the one `OPEN` and `CLOSE` of `output`."""
    before, rest = output.split(OPEN, 1)
    inside = rest.split(CLOSE, 1)[0]
    start = len(words(html.unescape(before)))
    return start, start + len(words(html.unescape(inside)))


def word_iou(first, second):
    """|A∩B| / |A∪B| of two word intervals `(start, end)`; 1.0 for two empty ones."""
    a, b = set(range(*first)), set(range(*second))
    return len(a & b) / len(a | b) if a | b else 1.0


def placement(stripped_sources, references, wanted, alignments):
    """`(share exact, mean IoU)` of tags put back into the references by `alignments`.

    Args:
        stripped_sources: `data.markup.strip` of each tagged source.
        references: the references.
        wanted: each sentence's proxy-aligned reference words `(start, end)`.
        alignments: each pair's Pharaoh line (source words to reference words).
    """
    from data.markup import restore

    exact, ious = 0, []
    for stripped, reference, target, line in zip(stripped_sources, references, wanted, alignments):
        got = enclosed_words(restore(stripped, reference, sorted(links_of(line))))
        exact += got == target
        ious.append(word_iou(got, target))
    return exact / max(len(ious), 1), statistics.fmean(ious) if ious else 0.0


# The runs.


def head_name(layer, head):
    return f"{layer}:{'mean' if head is None else head}"


def all_heads_aligner(translator):
    """A `tf.function` `(inputs string [B], targets string [B]) -> string [L * (H + 1), B]`:
    each pair's Pharaoh line from every head of every decoder layer and each layer's mean, in
    the order of `heads(config)`, all read from one teacher-forced pass, each lifted to words
    as `Translator.word_alignments` lifts its head's."""
    import tensorflow as tf

    from app.decoding.alignment import pharaoh, select_head, word_links
    from app.decoding.ensemble import Ensemble
    from app.decoding.forced import decoder_inputs

    model = translator.transformer
    member = model.members[0] if isinstance(model, Ensemble) else model

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.string)])
    def align(inputs, targets):
        source_ids, target_ids, source_words, target_words, source_counts, target_counts = (
            translator.alignment_inputs(inputs, targets)
        )
        memory, memory_mask = member.encode(source_ids, training=False)  # [B, S, D], [B, 1, S]
        _, _, cross = member.decoder_states(
            decoder_inputs(target_ids), memory, memory_mask, training=False, return_attention_scores=True
        )  # L x [B, H, T, S]
        lines = []
        for layer, head in heads(member.config):
            weights = select_head(cross[layer], head)  # [B, T, S]
            lines.append(pharaoh(word_links(weights, source_words, target_words, source_counts, target_counts)))
        return tf.stack(lines)  # [L * (H + 1), B]

    return align


def heads(config):
    """Every `(layer, head)` of a model, head None for the layer's mean after its heads."""
    return [(layer, head) for layer in range(config.num_layers) for head in [*range(config.num_heads), None]]


def batched(function, items, batch_size):
    """`function` over `items` (sentences, or pairs of them) in batches of similar length,
    as app.evaluate batches them; the results in the order of `items`."""
    from app.evaluation.in_order import in_length_order

    def length(item):
        return len(item) if isinstance(item, str) else sum(len(side) for side in item)

    return in_length_order(function, items, batch_size, length=length)


def measure_run(role, run_dir, sides, proxy_links, args):
    """A run's alignments of every head over the scored pairs, its AER and its test
    translations: a dict for the tables."""
    import tensorflow as tf

    from app.decoding.config import DecodingConfig, chosen_alignment_head
    from app.export.saved_model import load_trained
    from app.model_dir.settings import load_settings

    started = time.monotonic()
    trained = load_trained(run_dir)
    _, _, train_settings = load_settings(run_dir)
    translator = trained.translator(DecodingConfig())
    config = trained.config
    default = chosen_alignment_head(config, train_settings=train_settings)
    align = all_heads_aligner(translator)
    run_heads = heads(config)

    def align_batch(pairs):
        lines = align(tf.constant([p[0] for p in pairs]), tf.constant([p[1] for p in pairs])).numpy()  # [heads, B]
        return [[line.decode("utf-8") for line in lines[:, k]] for k in range(len(pairs))]

    lines, scores = {}, {}
    for split in SCORED_SPLITS:
        sources, references = sides[split]
        per_pair = batched(align_batch, list(zip(sources, references)), args.batch_size)  # [N][heads]
        lines[split] = {head: [pair[h] for pair in per_pair] for h, head in enumerate(run_heads)}
        scores[split] = {
            head: aer([links_of(line) for line in lines[split][head]], proxy_links[split]) for head in run_heads
        }
    best = min(run_heads, key=lambda head: (scores["validation"][head], run_heads.index(head)))
    aligned_seconds = time.monotonic() - started

    def translate(batch):
        return [text.decode("utf-8") for text in translator.serve(tf.constant(batch))["translations"].numpy()]

    started = time.monotonic()
    translations = batched(translate, sides[TEST][0], args.batch_size)
    return {
        "role": role, "dir": run_dir, "config": config, "heads": run_heads, "default": (default.layer, default.head),
        "best": best, "lines": lines, "aer": scores, "translations": translations,
        "weights": trained.weights, "seconds": (aligned_seconds, time.monotonic() - started),
    }


# The tables.


def percent(share):
    return f"{100.0 * share:.1f}%"


def print_aer(run, sides):
    config = run["config"]
    layer, head = run["default"]
    seconds = run["seconds"][0]
    print()
    print(
        f"AER of {run['role']} {run['dir']} ({run['weights']}): {config.num_layers} decoder layers x "
        f"{config.num_heads} heads and their mean, against the proxy on {len(sides['validation'][0])} validation and "
        f"{len(sides[TEST][0])} {TEST} pairs ({seconds:.0f} s with loading); {BEST}: best on validation; "
        f"{DEFAULT}: the head its exports read ({head_name(layer, head)})"
    )
    print(f"| layer | head | AER validation | AER {TEST} | |")
    print("| --- | --- | --- | --- | --- |")
    for layer, head in run["heads"]:
        marks = [BEST] * ((layer, head) == run["best"]) + [DEFAULT] * ((layer, head) == run["default"])
        print(
            f"| {layer} | {'mean' if head is None else head} | {percent(run['aer']['validation'][(layer, head)])} | "
            f"{percent(run['aer'][TEST][(layer, head)])} | {' '.join(marks)} |"
        )
    best = run["best"]
    print(
        f"best on validation: {head_name(*best)}, {TEST} AER {percent(run['aer'][TEST][best])} "
        f"(default {head_name(*run['default'])}: {percent(run['aer'][TEST][run['default']])})"
    )


def print_bleu(rows, references, compared):
    """`rows`: `(name, translations)`, the unguided run first; the first `compared` rows
    decode alike (the runs in memory), and only those get a p against the first: the
    export's row decodes at its own alpha, another comparison."""
    import sacrebleu

    from app.evaluation.metrics import lc_norm_tok_bleu
    from app.evaluation.significance import bleu_statistics, p_not_below

    print()
    print(
        f"BLEU on {len(references)} sentences of {TEST}; p: paired bootstrap against the unguided run "
        "(the share of resamples where the lower scores at least the higher's lowercased BLEU)"
    )
    print("| model | BLEU lc | BLEU lc.norm.tok | p against unguided |")
    print("| --- | --- | --- | --- |")
    baseline = bleu_statistics(rows[0][1], references, lowercase=True)
    base_bleu = sacrebleu.corpus_bleu(rows[0][1], [references], lowercase=True).score
    for k, (name, translations) in enumerate(rows):
        bleu = sacrebleu.corpus_bleu(translations, [references], lowercase=True).score
        lc_norm_tok = lc_norm_tok_bleu(translations, references, TARGET_LANG)[0]
        p = ""
        if 0 < k < compared:
            stats = bleu_statistics(translations, references, lowercase=True)
            lower, higher = (stats, baseline) if bleu <= base_bleu else (baseline, stats)
            p = f"{p_not_below(lower, higher):.3f}"
        print(f"| {name} | {bleu:.2f} | {lc_norm_tok:.2f} | {p} |")


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    for flag, path in (("--unguided", args.unguided), ("--guided", args.guided)):
        if path is not None and not os.path.isdir(path):
            raise SystemExit(f"{flag} {path}: no such directory")
    saved_model = None
    if args.saved_model:
        from app.export.locate import ExportNotFound, saved_model_version

        try:
            saved_model = saved_model_version(args.saved_model)
        except ExportNotFound as error:
            raise SystemExit(f"--saved-model: {error}") from None
    sides = {
        split: tuple(read_multi30k_lines(split, lang, args.sentences) for lang in (SOURCE_LANG, TARGET_LANG))
        for split in SCORED_SPLITS
    }
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the tokenizer's ops)
    import sacrebleu

    from app.decoding.config import DecodingConfig

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    header = machine.machine_header([
        f"TensorFlow {tf.__version__}", f"sacreBLEU {sacrebleu.__version__}", proxy_engine(args),
    ])

    def log(line):
        print(line, file=sys.stderr, flush=True)

    if args.proxy:
        every_pair = corpus_splits()
        proxy_lines = read_proxy_file(args.proxy, every_pair)
        proxy_row = (
            f"| {args.proxy}: given, for validation+{TEST} | {sum(len(lines) for lines in proxy_lines.values())} | "
            f"{sum(len(line.split()) for lines in proxy_lines.values() for line in lines)} | | |"
        )
    else:
        key = proxy_key()
        proxy = made_proxy(args.proxy_cache or default_proxy_cache(key), key, corpus_splits(), log)
        proxy_lines = {split: proxy[split] for split in SCORED_SPLITS}
        proxy_row = (
            f"| eflomal {proxy['key']['eflomal']} + grow-diag-final-and on {'+'.join(PROXY_SPLITS)} | "
            f"{proxy['pairs']} | {proxy['links']} | {proxy['seconds']:.0f} s{' (now)' if proxy['made_now'] else ''} | "
            f"{proxy['cache']} |"
        )
    source_name = LANGUAGE_NAMES.get(SOURCE_LANG, SOURCE_LANG)
    target_name = LANGUAGE_NAMES.get(TARGET_LANG, TARGET_LANG)
    proxy_note = f"a proxy, not gold: no gold {target_name}-{source_name} alignments are available here"
    proxy_links = {
        split: [links_of(line) for line in proxy_lines[split][: len(sides[split][0])]] for split in SCORED_SPLITS
    }

    runs = [measure_run("unguided", args.unguided, sides, proxy_links, args)]
    if args.guided:
        runs.append(measure_run("guided", args.guided, sides, proxy_links, args))

    sources, references = sides[TEST]
    export = measure_export(saved_model, args, sources) if saved_model else None

    for line in header:
        print(line)
    print(
        f"Multi30k {SOURCE_LANG}-{TARGET_LANG}: {len(sides['validation'][0])} validation and {len(sources)} {TEST} "
        f"sentences, batch {args.batch_size}, one thread per op, {args.threads} ops at once"
    )
    print()
    print(f"Reference alignments: {proxy_note}")
    print("| proxy | pairs | links | made in | kept in |")
    print("| --- | --- | --- | --- | --- |")
    print(proxy_row)
    for run in runs:
        print_aer(run, sides)
    settings = f"in memory, beam {DecodingConfig.beam_size}, alpha {DecodingConfig.alpha}"
    rows = [(f"{run['role']} {run['dir']} ({settings})", run["translations"]) for run in runs]
    if export:
        rows.append((f"export {export['path']} serving_default ({export['decoding']})", export["plain"]))
    print_bleu(rows, references, compared=len(runs))
    print_markup(sides, proxy_links[TEST], runs, export, args.seed)
    if export:
        print_speed(export, len(sources), args)


def print_markup(sides, proxy_links, runs, export, seed):
    """The markup part: tags drawn on the test sources, put back (a) through the export's
    `align` and (b) into the references by forced alignment."""
    from data.markup import strip

    sources, references = sides[TEST]
    draws = [
        draw_tag(links, len(words(source)), seed, k) for k, (links, source) in enumerate(zip(proxy_links, sources))
    ]
    drawn = [k for k, span in enumerate(draws) if span is not None]
    markups = [tagged(sources[k], draws[k]) for k in drawn]
    print()
    print(
        f"Markup on {TEST}: one {OPEN}...{CLOSE} pair around 1-{LONGEST_TAGGED} source words whose proxy-aligned "
        f"reference words are non-empty and contiguous, drawn with Random({seed} + index): "
        f"{len(drawn)} of {len(sources)} sentences; {len(sources) - len(drawn)} without such a phrase"
    )
    share = 1.0 / max(len(drawn), 1)
    if export:
        outputs = export["markup"](markups)
        formed = sum(well_formed(out) for out in outputs)
        kept = sum(
            tags_of(out) == tags_of(markup) and out.index(OPEN) < out.index(CLOSE)
            for markup, out in zip(markups, outputs)
        )
        same_text = sum(_plain_text(out) == export["plain"][k] for k, out in zip(drawn, outputs))
        print()
        print("(a) through align and data.markup.translate_markup (goal: 100% each)")
        print("| export | sentences | well-formed | every tag exactly once | plain text = serving_default's |")
        print("| --- | --- | --- | --- | --- |")
        print(
            f"| {export['path']} ({export['head']}) | {len(drawn)} | {percent(formed * share)} | "
            f"{percent(kept * share)} | {percent(same_text * share)} |"
        )
    stripped = [strip(markup) for markup in markups]
    placed_references = [references[k] for k in drawn]
    wanted = []
    for k in drawn:
        targets = aligned_words(proxy_links[k], draws[k])
        wanted.append((targets[0], targets[-1] + 1))
    print()
    print("(b) through forced alignment of the reference: the tag put back into the reference")
    print("| aligned by | head | tag encloses exactly the proxy's words | mean word IoU |")
    print("| --- | --- | --- | --- |")
    if export:
        lines = export["align_targets"]([sources[k] for k in drawn], placed_references)
        exact, iou = placement(stripped, placed_references, wanted, lines)
        print(f"| export {export['path']} align_targets | {export['head']} | {percent(exact)} | {iou:.3f} |")
    for run in runs:
        for label, head in ((DEFAULT, run["default"]), (BEST, run["best"])):
            lines = [run["lines"][TEST][head][k] for k in drawn]
            exact, iou = placement(stripped, placed_references, wanted, lines)
            print(f"| {run['role']} {run['dir']}, {label} | {head_name(*head)} | {percent(exact)} | {iou:.3f} |")


def print_speed(export, sentences, args):
    print()
    print(
        f"Speed of {export['path']} on {sentences} sentences of {TEST}: batch {args.batch_size}, "
        f"chunks of {args.chunk_sentences} in turns, {args.rounds} round{'s' * (args.rounds > 1)} "
        "(the goal: align >= 0.9x)"
    )
    print("| signature | sentences/s | speed over serving_default (lowest-highest) |")
    print("| --- | --- | --- |")
    seconds = export["seconds"]
    for name in ("serving_default", "align"):
        speeds = [sentences / s for s in seconds[name]]
        ratios = [b / s for s, b in zip(seconds[name], seconds["serving_default"])]
        print(
            f"| {name} | {statistics.median(speeds):.1f} | "
            f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |"
        )


def _plain_text(markup):
    from data.markup import MarkupError, markup_text

    try:
        return markup_text(markup)
    except MarkupError:
        return None


def proxy_engine(args):
    if args.proxy:
        return "proxy from a file"
    try:
        return f"eflomal {importlib.metadata.version('eflomal')}"
    except importlib.metadata.PackageNotFoundError:
        return "eflomal not installed"


def measure_export(path, args, sources):
    """The export's plain translations and speed (its `serving_default` and `align` in
    turns), and functions for the markup part: a dict."""
    import tensorflow as tf

    from app.export.export_info import exported_decoding, read_export_info
    from data.markup import translate_markup

    loaded = tf.saved_model.load(path)
    signatures = loaded.signatures
    if "align" not in signatures or not hasattr(loaded, "align_targets"):
        raise SystemExit(f"{path} has no align signature: export it again with this version of export.py")
    info = read_export_info(path)
    decoding = exported_decoding(path)

    def plain(batch):
        outputs = signatures["serving_default"](inputs=tf.constant(batch))
        return [text.decode("utf-8") for text in outputs["translations"].numpy()]

    def aligned(batch):
        outputs = signatures["align"](inputs=tf.constant(batch))
        return list(zip(
            (text.decode("utf-8") for text in outputs["translations"].numpy()),
            (line.decode("utf-8") for line in outputs["alignments"].numpy()),
        ))

    configurations = {"serving_default": plain, "align": aligned}
    for translate in configurations.values():
        translate(sources[: args.batch_size])  # each signature's first call traces and optimizes
    seconds = {name: [0.0] * args.rounds for name in configurations}
    outputs = {name: [] for name in configurations}
    for round_index in range(args.rounds):
        for chunk_start in range(0, len(sources), args.chunk_sentences):
            chunk = sources[chunk_start : chunk_start + args.chunk_sentences]
            for name, translate in configurations.items():
                started = time.perf_counter()
                texts = []
                for start in range(0, len(chunk), args.batch_size):
                    texts += translate(chunk[start : start + args.batch_size])
                seconds[name][round_index] += time.perf_counter() - started
                if round_index == 0:
                    outputs[name] += texts

    def markup(markups):
        return translate_markup(markups, lambda texts: batched(aligned, texts, args.batch_size))

    def align_targets(inputs, targets):
        def batch(pairs):
            result = loaded.align_targets(tf.constant([p[0] for p in pairs]), tf.constant([p[1] for p in pairs]))
            return [line.decode("utf-8") for line in result["alignments"].numpy()]

        return batched(batch, list(zip(inputs, targets)), args.batch_size)

    alpha = decoding.alpha if decoding.alpha is not None else "as exported"
    return {
        "path": path, "plain": outputs["serving_default"], "seconds": seconds, "markup": markup,
        "align_targets": align_targets, "head": info.get("alignment_head", "as exported"),
        "decoding": f"beam {decoding.beam_size}, alpha {alpha}",
    }


if __name__ == "__main__":
    main()
