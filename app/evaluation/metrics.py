"""The scores of translations against references, each printed with what it measures.

    sacreBLEU        cased BLEU of detokenized text, 13a tokens: the comparable figure
    chrF             character n-gram F-score
    BLEU lowercased  the same BLEU, lowercased
    Moses lc BLEU    lowercased BLEU of Moses-tokenized text: published Multi30k figures
    paper BLEU       cased BLEU of Moses-tokenized text, German compounds split at their
                     hyphens: the figure of the paper's Table 2 (tensor2tensor's
                     get_ende_bleu.sh), not comparable with sacreBLEU's

The last two re-create, from detokenized output, measurements that were made on
tokenized text: sacremoses is the Python port of Moses' tokenizer.perl (run without -a,
so hyphens stay inside words), and BLEU over space-separated tokens without smoothing
is multi-bleu.perl's.
"""

import re

# tensor2tensor's get_ende_bleu.sh, after GNMT and ConvS2S: a hyphen with a non-space on
# either side becomes its own token, "rich-text" -> "rich ##AT##-##AT## text". Matches do
# not overlap, as in Perl's s{(\S)-(\S)}{...}g: "a-b-c" -> "a ##AT##-##AT## b-c".
_HYPHENATED = re.compile(r"(\S)-(\S)")
COMPOUND_HYPHEN = "##AT##-##AT##"
# The target languages whose published WMT figures split compounds (en-de; en-fr did not).
SPLITS_COMPOUNDS = ("de",)


def score(hypotheses, references, target_lang=None):
    """sacreBLEU's BLEU, chrF and lowercased BLEU, each with its signature; the
    lowercased BLEU of Moses-tokenized text as Multi30k papers compute it; the paper's
    tokenized BLEU (`paper_bleu`); and how long the hypotheses are: BLEU's brevity
    penalty and the length ratio (hypothesis tokens / reference tokens, 13a tokens). A
    ratio below 1 costs BLEU through the penalty whatever the n-gram precisions.

    Args:
        hypotheses, references: detokenized strings, one per sentence.
        target_lang: their language, for the Moses tokenizer's per-language rules
            (non-breaking prefixes, apostrophes) and whether compounds are split; None
            tokenizes as English.
    """
    import sacrebleu

    results = {}
    for name, metric in (
        ("bleu", sacrebleu.metrics.BLEU()),
        ("chrf", sacrebleu.metrics.CHRF()),
        ("bleu_lowercase", sacrebleu.metrics.BLEU(lowercase=True)),
    ):
        corpus_score = metric.corpus_score(hypotheses, [references])
        results[name] = round(corpus_score.score, 2)
        results[name + "_signature"] = str(metric.get_signature())
        if name == "bleu":
            results["brevity_penalty"] = round(corpus_score.bp, 3)
            results["length_ratio"] = round(corpus_score.ratio, 3)
    value, signature = moses_lowercase_bleu(hypotheses, references, target_lang)
    results["bleu_moses_lowercase"], results["bleu_moses_lowercase_signature"] = round(value, 2), signature
    value, signature = paper_bleu(hypotheses, references, target_lang)
    results["bleu_paper"], results["bleu_paper_signature"] = round(value, 2), signature
    return results


def moses_lowercase_bleu(hypotheses, references, target_lang=None):
    """`(BLEU, signature)` of lowercased, Moses-tokenized hypotheses and references.

    The published Multi30k figures (Transformer-Tiny's 41.02 among them) are
    multi-bleu.perl on text that was lowercased and tokenized by Moses' tokenizer.perl
    before training; this re-creates that measurement from detokenized output.
    """
    lang = target_lang or "en"
    tokenize = _moses_tokenizer(lang)
    return _tokenized_bleu(
        [tokenize(line.lower()) for line in hypotheses], [tokenize(line.lower()) for line in references],
        smooth_method="exp", case="lc", tok=f"moses-{lang}",
    )


def paper_bleu(hypotheses, references, target_lang=None):
    """`(BLEU, signature)` as the paper measured its WMT 2014 figures (Table 2: base
    27.3 en-de and 38.1 en-fr, big 28.4 and 41.8): cased BLEU of Moses-tokenized text,
    with German compounds split at their hyphens (`split_compounds`), as
    multi-bleu.perl scores it (no smoothing: a corpus without a matching 4-gram scores 0).

    It runs higher than sacreBLEU's figure on the same output: split compounds add easy
    matches ("##AT##-##AT##" and both halves), and tokenized references are not what
    other systems' detokenized output is compared against. Compare it with the paper,
    and sacreBLEU with everything else.
    """
    lang = target_lang or "en"
    tokenize = _moses_tokenizer(lang)
    split = lang in SPLITS_COMPOUNDS
    prepare = (lambda line: split_compounds(tokenize(line))) if split else tokenize
    return _tokenized_bleu(
        [prepare(line) for line in hypotheses], [prepare(line) for line in references],
        smooth_method="none", case="mixed", tok=f"moses-{lang}" + ("+compound-split" if split else ""),
    )


def split_compounds(tokenized):
    """A tokenized line with each hyphen between two non-spaces made a token of its own,
    written "##AT##-##AT##" (tensor2tensor's get_ende_bleu.sh)."""
    return _HYPHENATED.sub(rf"\1 {COMPOUND_HYPHEN} \2", tokenized)


def _moses_tokenizer(lang):
    """`tokenize(line) -> str`: tokenizer.perl's tokens for `lang`, space-separated,
    unescaped (escaping maps characters one to one on both sides: BLEU is the same)."""
    import sacremoses

    tokenizer = sacremoses.MosesTokenizer(lang=lang)
    return lambda line: tokenizer.tokenize(line, escape=False, return_str=True)


def _tokenized_bleu(hypotheses, references, smooth_method, case, tok):
    """`(BLEU, signature)` of space-tokenized lines, with a signature that says what was
    done to them before sacreBLEU saw them."""
    import sacrebleu
    import sacremoses

    # force: the input is tokenized on purpose (sacreBLEU would warn about it).
    bleu = sacrebleu.metrics.BLEU(tokenize="none", force=True, smooth_method=smooth_method)
    value = bleu.corpus_score(hypotheses, [references]).score
    signature = (
        str(bleu.get_signature())
        .replace("case:mixed", f"case:{case}")
        .replace("tok:none", f"tok:{tok}(sacremoses-{sacremoses.__version__})")
    )
    return value, signature
