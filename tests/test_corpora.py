import hashlib
import urllib.error
import zipfile
from dataclasses import replace

import pytest

from pipeline_src.config import data_config, validate
from pipeline_src.data import corpora
from pipeline_src.data.corpora import CorpusError, copy_local, fetch
from pipeline_src.data.prepare import load_split, prepare


@pytest.fixture
def offline(monkeypatch):
    """No network: every urlopen fails the way it does on an air-gapped machine."""
    calls = []

    def refuse(url, *a, **k):
        calls.append(url)
        raise urllib.error.URLError("network is unreachable")

    monkeypatch.setattr(corpora.urllib.request, "urlopen", refuse)
    return calls


def _prepared(tmp_path, default_params, corpus, mirror):
    raw, out = tmp_path / "raw", tmp_path / "prep"
    fetch(corpus, raw, mirror)
    meta = prepare(raw, out, data_config(validate(default_params), corpus))
    return raw, out, meta


def test_ptb_through_the_mirror_has_the_published_counts(tmp_path, mirror, offline, default_params):
    raw, out, meta = _prepared(tmp_path, default_params, "ptb", mirror)
    assert offline == []  # the mirror was enough
    assert meta["vocab_size"] == 10_000
    assert [meta["splits"][s]["tokens"] for s in ("train", "valid", "test")] == [929_589, 73_760, 82_430]
    assert meta["splits"]["valid"]["oov_replaced"] == 0
    src = meta["source"]["files"]["train"]
    assert src["sha256"] == "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf"
    assert len(load_split(out, "train")) == 929_589


def test_wikitext2_through_the_mirror_has_the_published_counts(tmp_path, mirror, offline, default_params):
    _, _, meta = _prepared(tmp_path, default_params, "wikitext-2", mirror)
    assert meta["vocab_size"] == 33_278
    assert [meta["splits"][s]["tokens"] for s in ("train", "valid", "test")] == [2_088_628, 217_646, 245_569]


def test_offline_without_mirror_says_how_to_provide_one(tmp_path, offline):
    with pytest.raises(CorpusError) as e:
        fetch("ptb", tmp_path / "raw", None)
    msg = str(e.value)
    assert "no mirror is configured" in msg and "LMBENCH_MIRROR" in msg and "mirror:" in msg
    assert "network is unreachable" in msg
    assert offline[0].endswith("simple-examples.tgz") and any(u.endswith("ptb.train.txt") for u in offline)
    assert not (tmp_path / "raw").exists() and list(tmp_path.iterdir()) == []


def test_checksum_mismatch_fails_and_leaves_nothing(tmp_path, mirror, offline):
    bad = tmp_path / "mirror" / "ptb"
    bad.mkdir(parents=True)
    for s in ("train", "valid", "test"):
        (bad / f"ptb.{s}.txt").write_bytes((mirror / "ptb" / f"ptb.{s}.txt").read_bytes())
    with open(bad / "ptb.valid.txt", "ab") as f:
        f.write(b" extra \n")
    with pytest.raises(CorpusError, match=r"checksum mismatch for mirror file .*ptb\.valid\.txt: md5 is"):
        fetch("ptb", tmp_path / "raw", tmp_path / "mirror")
    assert not (tmp_path / "raw").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_archive_in_the_mirror_is_verified_and_extracted(tmp_path, monkeypatch, offline):
    """The archive path of the registry, with a small archive whose digests we control."""
    members = {s: f"wikitext-2/wiki.{s}.tokens" for s in ("train", "valid", "test")}
    texts = {s: f" a {s} line \n".encode() for s in members}
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    with zipfile.ZipFile(mirror / "wikitext-2-v1.zip", "w") as z:
        for s, m in members.items():
            z.writestr(m, texts[s])
    digest = hashlib.sha256((mirror / "wikitext-2-v1.zip").read_bytes()).hexdigest()
    wt2 = corpora.REGISTRY["wikitext-2"]
    fake = replace(wt2, archive=replace(wt2.archive, digest=digest, size=None),
                   splits={s: replace(sf, digests={"sha1": hashlib.sha1(texts[s]).hexdigest()})
                           for s, sf in wt2.splits.items()})
    monkeypatch.setitem(corpora.REGISTRY, "wikitext-2", fake)
    prov = fetch("wikitext-2", tmp_path / "raw", mirror)
    assert (tmp_path / "raw" / "valid.txt").read_bytes() == texts["valid"]
    assert prov["files"]["test"]["from"].endswith("wikitext-2-v1.zip!wikitext-2/wiki.test.tokens")
    assert not (tmp_path / "raw" / "wikitext-2-v1.zip").exists()
    # a corrupted archive is refused
    with open(mirror / "wikitext-2-v1.zip", "ab") as f:
        f.write(b"x")
    with pytest.raises(CorpusError, match="checksum mismatch for archive"):
        fetch("wikitext-2", tmp_path / "raw2", mirror)
    assert not (tmp_path / "raw2").exists()


def test_registry_has_the_canonical_sources():
    reg = corpora.REGISTRY
    assert set(reg) == {"ptb", "wikitext-2", "wikitext-103", "lm1b"}
    assert reg["ptb"].archive.urls[0] == "http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz"
    assert reg["wikitext-103"].archive.size == 190_229_076
    assert reg["lm1b"].archive.digest.startswith("01ba6038")
    assert len(reg["lm1b"].archive.members["train"]) == 99


def test_local_corpus(tmp_path):
    for s in ("train", "valid", "test"):
        (tmp_path / f"{s}.txt").write_text(f"{s} words\n")
    paths = {s: str(tmp_path / f"{s}.txt") for s in ("train", "valid", "test")}
    prov = copy_local(paths, tmp_path / "raw")
    assert (tmp_path / "raw" / "test.txt").read_text() == "test words\n"
    assert len(prov["files"]["train"]["sha256"]) == 64
    paths["valid"] = str(tmp_path / "missing.txt")
    with pytest.raises(CorpusError, match="corpus.valid: file .*missing.txt does not exist"):
        copy_local(paths, tmp_path / "raw2")
