"""The standard test sets (WMT's newstest and the others sacreBLEU knows), read without
any training corpus.

    sources, references = read_test_set("wmt14/full", "en", "de")   # newstest2014, 3,003 lines

sacreBLEU's registry (`sacrebleu.DATASETS`) says where each test set's archive lives and
what its MD5 is; sacreBLEU caches the archive and the plain text it extracts under
$SACREBLEU (default ~/.sacrebleu), the same files `sacrebleu -t wmt14/full -l en-de --echo
src` reads. Here the archive is fetched with a timeout, checked, and written whole or not
at all; without network the error names the address and the path where the archive can
be placed by hand, and a placed archive is checked and extracted as a downloaded one.

Names to know: sacreBLEU's `wmt14` is the filtered newstest2014 (2,737 sentences for
en-de), `wmt14/full` the one the paper and tensor2tensor scored (3,003).
"""

import dataclasses
import difflib
import hashlib
import os
import re
import urllib.error
import urllib.request
from typing import List

from data.errors import DataError
from data.text_files import read_parallel_lines

# Seconds to wait for the archive's server: without network, fail in seconds, not minutes.
DOWNLOAD_TIMEOUT_S = 10
# The test sets that differ from what their name suggests, and what to say about them.
NOTES = {
    "wmt14": "sacreBLEU's wmt14 is newstest2014 filtered (2,737 sentences for en-de); "
    "the paper scored the full set: --test-set wmt14/full",
}


@dataclasses.dataclass(frozen=True)
class TestSet:
    """One test set for one language pair, read: its lines and where they came from."""

    __test__ = False  # not a pytest class

    name: str
    langpair: str
    sources: List[str]
    references: List[str]
    # The plain-text files sacreBLEU wrote, source then reference.
    paths: List[str]


def read_test_set(name, source_lang, target_lang):
    """The `TestSet` `name` of sacreBLEU's registry for `source_lang`-`target_lang`,
    fetched into sacreBLEU's cache first where it is not there (the first reference where
    a test set has several).

    Raises:
        DataError: a name or a language pair the registry does not have (the close names,
            or the pairs it has, listed), an archive that cannot be fetched (its address
            and where to place it), or one whose MD5 is not the registry's.
    """
    dataset = registered_test_set(name)
    langpair = f"{source_lang}-{target_lang}"
    if langpair not in dataset.langpairs:
        pairs = ", ".join(sorted(pair for pair in dataset.langpairs if pair != "meta"))
        raise DataError(f"sacreBLEU's test set {name} has no {langpair}; it has {pairs}")
    fields = dataset.fieldnames(langpair)
    reference_field = next(field for field in fields if field.startswith("ref"))
    paths = [_text_path(dataset, langpair, field) for field in fields]
    if not all(os.path.exists(path) for path in paths):
        _fetch_archives(dataset, langpair)
        dataset.process_to_text(langpair)  # sacreBLEU's own extraction: the archives are in place
    source_path, reference_path = (_text_path(dataset, langpair, field) for field in ("src", reference_field))
    sources, references = read_parallel_lines(source_path, reference_path)
    return TestSet(name, langpair, sources, references, [source_path, reference_path])


def registered_test_set(name):
    """sacreBLEU's dataset object for `name`; DataError naming the close names otherwise."""
    from sacrebleu.dataset import DATASETS

    if name not in DATASETS:
        # sacreBLEU names WMT's sets by campaign: newstest2014 is wmt14's (wmt14/full whole).
        newstest = re.fullmatch(r"newstest20(\d\d)", name.lower())
        guess = [f"wmt{newstest.group(1)}/full", f"wmt{newstest.group(1)}"] if newstest else []
        close = guess + difflib.get_close_matches(name.lower(), DATASETS, n=5, cutoff=0.6)
        hint = f"; close names: {', '.join(dict.fromkeys(c for c in close if c in DATASETS))}" if close else ""
        raise DataError(f"sacreBLEU knows no test set {name!r}{hint} (`sacrebleu --list` lists them)")
    return DATASETS[name]


def archive_paths(dataset):
    """`[(address, path in the cache, MD5 or None)]`: each archive of a test set, where
    sacreBLEU keeps it."""
    md5s = dataset.md5 or [None] * len(dataset.data)
    return [
        (url, os.path.join(dataset._rawdir, dataset._get_tarball_filename(url)), md5)
        for url, md5 in zip(dataset.data, md5s)
    ]


def _text_path(dataset, langpair, field):
    return dataset._get_txt_file_path(langpair, field)


def _fetch_archives(dataset, langpair):
    """Every archive of `dataset` downloaded (or placed) into sacreBLEU's cache, checked and
    extracted where its files are not there yet."""
    from sacrebleu.utils import extract_tarball

    for url, archive, md5 in archive_paths(dataset):
        fresh = not os.path.exists(archive)
        if fresh:
            _download(url, archive, dataset.name)
        found = _md5(archive) if md5 else None
        if found != md5:
            # A download cut short or another file placed by hand: say which, and keep it
            # aside rather than reading it.
            raise DataError(
                f"{archive} has MD5 {found}, not {md5} as sacreBLEU's registry says for {url}; "
                "remove it and run again, or place the right file there"
            )
        if fresh or not _extracted(dataset, langpair):
            extract_tarball(archive, dataset._rawdir)


def _extracted(dataset, langpair):
    """Whether the raw files of `langpair` that sacreBLEU reads are in its cache."""
    origins = dataset.langpairs.get(langpair, [])
    return all(os.path.exists(os.path.join(dataset._rawdir, origin)) for origin in origins if isinstance(origin, str))


def _download(url, archive, name):
    """`url` written to `archive` whole or not at all; DataError with the way round it."""
    os.makedirs(os.path.dirname(archive), exist_ok=True)
    partial = f"{archive}.part"
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response, open(partial, "wb") as out:
            while chunk := response.read(1 << 20):
                out.write(chunk)
    except (urllib.error.URLError, OSError) as error:
        if os.path.exists(partial):
            os.remove(partial)
        reason = getattr(error, "reason", error)
        raise DataError(
            f"could not download sacreBLEU's test set {name} from {url} ({reason}); without network, "
            f"fetch that file elsewhere and place it at {archive} (the folder is $SACREBLEU, "
            "default ~/.sacrebleu), then run again"
        ) from None
    os.replace(partial, archive)


def _md5(path):
    digest = hashlib.md5()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
