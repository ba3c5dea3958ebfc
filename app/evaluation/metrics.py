"""The scores of translations against references, each printed with what it measures.

    sacreBLEU        cased BLEU of detokenized text, 13a tokens: the comparable figure
    chrF             character n-gram F-score
    BLEU lowercased  the same BLEU, lowercased
    Moses lc BLEU    lowercased BLEU of Moses-tokenized text: published Multi30k figures
    lc.norm.tok BLEU BLEU on Multi30k's `lc.norm.tok` form of both sides: lowercased,
                     punctuation normalized, Moses-tokenized with hyphens split: the
                     form the published text-only Multi30k results were scored on
    paper BLEU       cased BLEU of Moses-tokenized text, the hypotheses' Unicode
                     punctuation replaced first and German compounds split at their
                     hyphens: the figure of the paper's Table 2 (tensor2tensor's
                     get_ende_bleu.sh), not comparable with sacreBLEU's

The last two re-create, from detokenized output, measurements that were made on
tokenized text: sacremoses is the Python port of Moses' tokenizer.perl (run without -a,
so hyphens stay inside words) and of its replace-unicode-punctuation.perl, and BLEU over
space-separated tokens without smoothing is multi-bleu.perl's. docs/serving.md ("The
paper's BLEU") says which version of get_ende_bleu.sh the paper BLEU follows.
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
    value, signature = lc_norm_tok_bleu(hypotheses, references, target_lang)
    results["bleu_lc_norm_tok"], results["bleu_lc_norm_tok_signature"] = round(value, 2), signature
    value, signature = paper_bleu(hypotheses, references, target_lang)
    results["bleu_paper"], results["bleu_paper_signature"] = round(value, 2), signature
    return results


def moses_lowercase_bleu(hypotheses, references, target_lang=None):
    """`(BLEU, signature)` of lowercased, Moses-tokenized hypotheses and references,
    unsmoothed (a corpus without a matching 4-gram scores 0).

    The published Multi30k figures (Transformer-Tiny's 41.02 among them) are
    multi-bleu.perl on text that was lowercased and tokenized by Moses' tokenizer.perl
    before training; this re-creates that measurement from detokenized output, and
    multi-bleu.perl does not smooth.
    """
    lang = target_lang or "en"
    tokenize = _moses_tokenizer(lang)
    return _tokenized_bleu(
        [tokenize(line.lower()) for line in hypotheses], [tokenize(line.lower()) for line in references],
        smooth_method="none", case="lc", tok=f"moses-{lang}",
    )


def lc_norm_tok_bleu(hypotheses, references, target_lang=None):
    """`(BLEU, signature)` of both sides in Multi30k's `lc.norm.tok` form, unsmoothed.

    The Multi30k release's tokenized files (`*.lc.norm.tok.*`), on which published
    text-only results are scored, were made by Moses' lowercase.perl, then
    normalize-punctuation.perl, then tokenizer.perl with `-a`, which splits hyphens
    inside words ("t-shirt" -> "t @-@ shirt"); BLEU is multi-bleu.perl's on those tokens.
    The same steps are applied here to detokenized hypotheses and raw references.
    """
    lang = target_lang or "en"
    import sacremoses

    normalize = sacremoses.MosesPunctNormalizer(lang=lang).normalize
    tokenizer = sacremoses.MosesTokenizer(lang=lang)

    def lc_norm_tok(line):
        return tokenizer.tokenize(normalize(line.lower()), aggressive_dash_splits=True, escape=False, return_str=True)

    return _tokenized_bleu(
        [lc_norm_tok(line) for line in hypotheses], [lc_norm_tok(line) for line in references],
        smooth_method="none", case="lc", tok=f"lc.norm.tok-{lang}",
    )


def paper_bleu(hypotheses, references, target_lang=None):
    """`(BLEU, signature)` as the paper measured its WMT 2014 figures (Table 2: base
    27.3 en-de and 38.1 en-fr, big 28.4 and 41.8): cased BLEU of the lines of
    `paper_bleu_tokens`, as multi-bleu.perl scores them (no smoothing: a corpus without
    a matching 4-gram scores 0).

    It runs higher than sacreBLEU's figure on the same output: split compounds add easy
    matches ("##AT##-##AT##" and both halves), and tokenized references are not what
    other systems' detokenized output is compared against. It can also run lower: a
    hypothesis whose curly quotes are those of the reference loses them to straight
    quotes, which the reference keeps. Compare it with the paper, and sacreBLEU with
    everything else.
    """
    lang = target_lang or "en"
    tokenized_hypotheses, tokenized_references = paper_bleu_tokens(hypotheses, references, lang)
    tok = f"moses-{lang}+hyp-unicode-punct" + ("+compound-split" if lang in SPLITS_COMPOUNDS else "")
    return _tokenized_bleu(tokenized_hypotheses, tokenized_references, smooth_method="none", case="mixed", tok=tok)


def paper_bleu_tokens(hypotheses, references, target_lang):
    """`(hypotheses, references)` as tensor2tensor's get_ende_bleu.sh hands them to
    multi-bleu.perl, unescaped, each a list of space-separated token lines.

    The hypotheses go through replace-unicode-punctuation.perl ("„Ja“ …" -> "„Ja\" ...":
    it straightens the closing and English quotes and the apostrophe, not "„" or "‚"),
    then tokenizer.perl; the references, which the script reads already tokenized, only
    through tokenizer.perl. For German, hyphens inside words become tokens of their own
    on both sides (`split_compounds`).
    """
    tokenize = _moses_tokenizer(target_lang)
    replace_punctuation = _unicode_punctuation_replacer()
    split = split_compounds if target_lang in SPLITS_COMPOUNDS else (lambda line: line)
    return (
        [split(tokenize(replace_punctuation(line))) for line in hypotheses],
        [split(tokenize(line)) for line in references],
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


def _unicode_punctuation_replacer():
    """`replace(line) -> str`: Moses' replace-unicode-punctuation.perl, as sacremoses
    ports it (it differs from the script only on Chinese and Japanese punctuation:
    docs/serving.md)."""
    import sacremoses

    return sacremoses.MosesPunctNormalizer().replace_unicode_punct


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
