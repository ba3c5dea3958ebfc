"""data/test_sets.py: WMT test sets through sacreBLEU's registry and cache, offline."""

import io
import os
import time
import urllib.request

import pytest

from data.errors import DataError
from data.test_sets import archive_paths, read_test_set, registered_test_set
from tests.sacrebleu_cache import SAMPLE_REFERENCES, SAMPLE_SOURCES, cache_in, place_sample_archive, sample_archive


def test_a_placed_archive_is_checked_extracted_and_read_by_sacrebleu_offline(monkeypatch, tmp_path):
    dataset = cache_in(monkeypatch, tmp_path)
    archive = place_sample_archive(monkeypatch, dataset)
    test_set = read_test_set("wmt14/full", "en", "de")
    assert (test_set.sources, test_set.references) == (SAMPLE_SOURCES, SAMPLE_REFERENCES)
    assert (test_set.name, test_set.langpair) == ("wmt14/full", "en-de")
    # sacreBLEU's own plain-text cache, as `sacrebleu -t wmt14/full -l en-de --echo src` reads it.
    assert test_set.paths == [str(tmp_path / "wmt14_full" / f"wmt14_full.en-de.{field}") for field in ("src", "ref")]
    # Read again from that text alone: the archive is no longer needed.
    archive.unlink()
    assert read_test_set("wmt14/full", "en", "de") == test_set


def test_offline_without_the_archive_fails_in_seconds_naming_the_file_and_where(monkeypatch, tmp_path):
    dataset = cache_in(monkeypatch, tmp_path)
    (url, archive, _), = archive_paths(dataset)
    assert url == "https://statmt.org/wmt14/test-full.tgz"
    started = time.monotonic()
    with pytest.raises(DataError) as error:
        read_test_set("wmt14/full", "en", "de")
    assert time.monotonic() - started < 5
    assert str(error.value) == (
        f"could not download sacreBLEU's test set wmt14/full from {url} ([Errno -2] Name or service not known); "
        f"without network, fetch that file elsewhere and place it at {archive} (the folder is $SACREBLEU, "
        "default ~/.sacrebleu), then run again"
    )
    assert archive == str(tmp_path / "wmt14_full" / "raw" / "wmt14_full.test-full.tgz")
    assert not os.path.exists(archive) and not os.path.exists(archive + ".part")


def test_a_download_is_written_whole_then_checked_and_extracted(monkeypatch, tmp_path):
    dataset = cache_in(monkeypatch, tmp_path)
    payload = tmp_path / "served.tgz"
    md5 = sample_archive(payload)
    monkeypatch.setattr(dataset, "md5", [md5])
    asked = []

    def served(url, timeout):
        asked.append((url, timeout))
        return io.BytesIO(payload.read_bytes())

    monkeypatch.setattr(urllib.request, "urlopen", served)
    assert read_test_set("wmt14/full", "en", "de").references == SAMPLE_REFERENCES
    assert asked == [("https://statmt.org/wmt14/test-full.tgz", 10)]
    (_, archive, _), = archive_paths(dataset)
    assert open(archive, "rb").read() == payload.read_bytes() and not os.path.exists(archive + ".part")


def test_an_archive_whose_md5_is_not_the_registrys_is_refused_by_name(monkeypatch, tmp_path):
    dataset = cache_in(monkeypatch, tmp_path)
    (_, archive, registered), = archive_paths(dataset)
    sample_archive(tmp_path / "wmt14_full" / "raw" / "wmt14_full.test-full.tgz")  # the registry's MD5 kept
    with pytest.raises(DataError, match=f"^{archive} has MD5 [0-9a-f]{{32}}, not {registered} as sacreBLEU's"):
        read_test_set("wmt14/full", "en", "de")


def test_unknown_names_and_pairs_are_refused_with_what_there_is():
    with pytest.raises(DataError, match=r"^sacreBLEU knows no test set 'wmt14/ful'; close names: wmt14/full, wmt14,"):
        registered_test_set("wmt14/ful")
    newstest = r"^sacreBLEU knows no test set 'newstest2014'; close names: wmt14/full, wmt14, "
    with pytest.raises(DataError, match=newstest):
        registered_test_set("newstest2014")
    with pytest.raises(DataError, match=r"^sacreBLEU's test set wmt14/full has no en-ja; it has cs-en, de-en, en-cs"):
        read_test_set("wmt14/full", "en", "ja")
