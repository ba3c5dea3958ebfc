"""sacreBLEU's cache of test sets, redirected to a test's folder and filled from a fixture
(tests/data/newstest2014_sample/), so that `--test-set wmt14/full` runs without network."""

import hashlib
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

SAMPLE = Path(__file__).parent / "data" / "newstest2014_sample"
SAMPLE_SOURCES = ["A man rides a bike.", "Two dogs play in the snow.", 'The "online game" ended.']
SAMPLE_REFERENCES = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "Das „Online-Spiel“ endete."]


def cache_in(monkeypatch, folder, name="wmt14/full"):
    """sacreBLEU's dataset `name`, its cache moved to `folder` for this test and the
    network cut (a download attempt raises URLError); the dataset."""
    from sacrebleu.dataset import DATASETS

    dataset = DATASETS[name]
    monkeypatch.setattr(dataset, "_outdir", str(folder / name.replace("/", "_")))
    monkeypatch.setattr(dataset, "_rawdir", str(folder / name.replace("/", "_") / "raw"))

    def offline(url, *args, **kwargs):
        raise urllib.error.URLError("[Errno -2] Name or service not known")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    return dataset


def sample_archive(path):
    """The fixture packed as sacreBLEU's wmt14/full archive holds newstest2014 en-de
    (test-full/newstest2014-deen-*.sgm), written to `path`; its MD5."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as archive:
        for sgm in sorted(SAMPLE.glob("*.sgm")):
            archive.add(sgm, arcname=f"test-full/{sgm.name}")
    return hashlib.md5(path.read_bytes()).hexdigest()


def place_sample_archive(monkeypatch, dataset):
    """The fixture's archive placed where sacreBLEU keeps the dataset's (as a user without
    network would), and the registry's MD5 made the fixture's; the archive's path."""
    from data.test_sets import archive_paths

    (url, path, _), = archive_paths(dataset)
    md5 = sample_archive(Path(path))
    monkeypatch.setattr(dataset, "md5", [md5])
    return Path(path)
